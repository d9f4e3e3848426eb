#include "runtime/client/client_impl.h"

namespace shoal {

void Client::Impl::StartTraining(ReplicaCache::Replica global, RoundConfig config) {
  StopTraining();
  train_cancel_ = cancel_.load();
  train_done_ = false;
  progress_ = 0.0f;
  training_round_ = config.round;
  training_ = true;
  if (hooks_.train_inline) {  // on this thread, now; the loop collects the result as usual
    TrainJob(*global, config);
    train_done_ = true;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    job_ = Job{std::move(global), config};
  }
  if (!worker_.joinable()) worker_ = std::thread([this] { WorkerLoop(); });
  work_cv_.notify_all();
}

void Client::Impl::WorkerLoop() {
  std::unique_lock<std::mutex> lock(work_mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return quit_ || job_.has_value(); });
    if (quit_) return;
    Job job = std::move(*job_);
    job_.reset();
    lock.unlock();
    TrainJob(*job.global, job.config);
    lock.lock();
    train_done_ = true;
    work_cv_.notify_all();
  }
}

// One round on the worker: federated evaluation of the global model as received, on this
// client's data, before it trains (trainers without Evaluate skip it), then local training.
void Client::Impl::TrainJob(std::span<const float> global, const RoundConfig& config) {
  TrainContext ctx;
  ctx.progress = [this](float p) { progress_.store(std::clamp(p, 0.0f, 1.0f)); };
  ctx.cancel = &train_cancel_;
  TrainResult result;
  Status st;
  std::optional<EvalResult> eval;
  try {  // an application trainer must not take the client down
    EvalResult e;
    Status evaluated = trainer_->Evaluate(global, &e);
    if (evaluated.ok() && std::isfinite(e.loss) && std::isfinite(e.accuracy)) eval = e;
    if (!evaluated.ok() && evaluated.code() != StatusCode::kFailedPrecondition)  // FailedPrecondition: cannot evaluate
      spdlog::warn("round {}: evaluating the received model failed: {}", config.round, evaluated.message());
    st = trainer_->Train(global, config, ctx, &result);
  } catch (const std::exception& e) {
    st = Status::Internal(std::string("trainer threw: ") + e.what());
  } catch (...) {
    st = Status::Internal("trainer threw a non-standard exception");
  }
  train_status_ = st;
  train_result_ = std::move(result);
  train_eval_ = eval;
}

// Abandons the round with the worker, if any: tells it to stop and waits until the trainer
// returns (a trainer that ignores the cancel flag holds the loop until it does).
void Client::Impl::StopTraining() {
  if (training_) {
    train_cancel_ = true;
    std::unique_lock<std::mutex> lock(work_mu_);
    work_cv_.wait(lock, [this] { return train_done_.load(); });
  }
  training_ = false;
  train_done_ = false;
  training_round_ = 0;
}

Status Client::Impl::FinishTraining() {
  // Called once train_done_ is seen: the worker wrote train_status_/train_result_ before it.
  training_ = false;
  train_done_ = false;
  const uint64_t round = training_round_;
  training_round_ = 0;
  if (!train_status_.ok()) {
    if (train_status_.code() == StatusCode::kCancelled) return Status::Ok();
    spdlog::error("round {}: local training failed: {}", round, train_status_.ToString());
    return Status::Ok();  // the aggregator times this client out for the round; keep serving
  }
  if (hooks_.partial_sum) {  // an edge aggregator: its clients' exact partial sum, as it is
    std::optional<std::vector<uint8_t>> bytes = hooks_.partial_sum(round);
    if (!bytes) return Status::Ok();
    runtime::Update u;
    u.round = round;
    u.num_examples = train_result_.num_examples;
    u.report = protocol::UpdateReport::FromTrainer(train_result_.metrics);
    SendUpdatePayload(u, *bytes, "partial sum", [&](const protocol::Header& h, const protocol::ChunkRef& chunk) {
      return protocol::EncodeUpdate(h, u.num_examples, u.report, protocol::PayloadEncoding::PartialSum, chunk);
    });
    return Status::Ok();
  }
  const size_t expected = LayoutSize(welcome_->task.layout);
  if (train_result_.delta.size() != expected)
    return Status::Internal("trainer returned a delta of " + std::to_string(train_result_.delta.size()) +
                            " floats; the model has " + std::to_string(expected));
  // The update stages (today: the codec, with error feedback when it has it).
  runtime::Update u;
  u.author = o_.name;
  u.round = round;
  u.num_examples = std::max<uint64_t>(train_result_.num_examples, 1);  // the aggregator refuses more than kMaxExamples
  u.delta = std::move(train_result_.delta);
  u.report = protocol::UpdateReport::FromTrainer(train_result_.metrics);
  u.report.eval = train_eval_;
  if (welcome_->privacy.secagg) {  // masked once this client's shares have arrived (secagg.cc)
    if (round == secagg_round_) {
      secagg_pending_ = std::move(u);
      SendMaskedIfReady();
    }
    return Status::Ok();
  }
  const bool slow = UseSlowCodec();
  if (slow_codec_ && slow != sent_slow_) {
    spdlog::info("round {}: measured upload {:.3g} Mbit/s, {} --codec-slow {}", round, upload_mbps_.value_or(0.0),
                 slow ? "below the aggregator's bound: back to" : "at or above the aggregator's bound: leaving",
                 welcome_->task.codec_slow);
    // The codec switched to starts afresh: an error-feedback residual kept from an older
    // model would be added to this one's update.
    const TaskConfig& task = welcome_->task;
    Status made = slow ? MakeUploadStages(task, task.codec_slow, slow_codec_, slow_stages_)
                       : MakeUploadStages(task, task.codec, up_codec_, update_stages_);
    if (!made.ok()) return made.WithContext("switching the upload codec");
  }
  sent_slow_ = slow;
  if (auto failed = (slow ? slow_stages_ : update_stages_).Run(u)) return failed->status.WithContext("preparing the update");
  journal_.Encoded(round, u.payload, slow, session_);
  const auto encoding = slow ? protocol::PayloadEncoding::CodecSlow : protocol::PayloadEncoding::Codec;
  SendUpdatePayload(u, u.payload, "update", [&](const protocol::Header& h, const protocol::ChunkRef& chunk) {
    return protocol::EncodeUpdate(h, u.num_examples, u.report, encoding, chunk);
  });
  return Status::Ok();
}

Status Client::Impl::MakeUploadStages(const TaskConfig& task, const std::string& spec,
                                      std::unique_ptr<codec::Codec>& codec, runtime::UpdatePipeline& stages) {
  SHOAL_ASSIGN_OR_RETURN(codec, codec::Codec::Create(spec, task.layout));
  stages = runtime::UpdatePipeline();
  stages.Add(runtime::EncodeStage(codec.get(), task.seed));
  return Status::Ok();
}

// Until an upload has been measured, the slow codec: a client on a slow link must not spend
// its first round sending the large encoding (the round would wait for it).
bool Client::Impl::UseSlowCodec() const {
  return slow_codec_ && (!upload_mbps_ || *upload_mbps_ < welcome_->task.slow_below_mbps);
}

void Client::Impl::MeasureUpload() {
  if (upload_bytes_ == 0) return;
  const double elapsed = std::chrono::duration<double>(Clock::now() - upload_started_).count();
  // The transfer's own time: less one round trip of latency, and at least 1 ms.
  const double seconds = std::max(elapsed - min_rtt_s_.value_or(0.0), 1e-3);
  const double mbps = static_cast<double>(upload_bytes_) * 8.0 / 1e6 / seconds;
  upload_mbps_ = upload_mbps_ ? 0.5 * *upload_mbps_ + 0.5 * mbps : mbps;
  upload_bytes_ = 0;
}

void Client::Impl::SendUpdatePayload(
    const runtime::Update& u, std::span<const uint8_t> payload, const char* what,
    const std::function<protocol::Frame(const protocol::Header&, const protocol::ChunkRef&)>& frame) {
  upload_started_ = Clock::now();
  upload_bytes_ = payload.size();
  for (const auto& chunk : protocol::SplitPayload(payload, welcome_->chunk_bytes)) {
    Status st = Send(frame(NextHeader(u.round), chunk));
    if (!st.ok()) {
      spdlog::warn("round {}: sending the {} failed: {}", u.round, what, st.message());
      return;
    }
  }
  awaiting_ack_round_ = u.round;
  acked_train_loss_ = u.report.train_loss.value_or(0.0);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.rounds_trained;
  }
  Reached(RoundPoint::kUpdateSent, u.round);
}

}  // namespace shoal
