#include "runtime/client/client_impl.h"

namespace shoal {

void Client::Impl::StartTraining(ReplicaCache::Replica global, RoundConfig config) {
  StopTraining();
  train_cancel_ = cancel_.load();
  progress_ = 0.0f;
  training_round_ = config.round;
  training_ = true;
  if (hooks_.train_inline) {  // on this thread, now; the loop collects the result as usual
    Trained t = TrainJob(*global, config);
    std::lock_guard<std::mutex> lock(work_mu_);
    trained_ = std::move(t);
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
    Trained t = TrainJob(*job.global, job.config);
    lock.lock();
    trained_ = std::move(t);
    work_cv_.notify_all();
  }
}

// One round on the worker: federated evaluation of the global model as received, on this
// client's data, before it trains (trainers without Evaluate skip it), then local training.
Client::Impl::Trained Client::Impl::TrainJob(std::span<const float> global, const RoundConfig& config) {
  TrainContext ctx;
  ctx.progress = [this](float p) { progress_.store(std::clamp(p, 0.0f, 1.0f)); };
  ctx.cancel = &train_cancel_;
  Trained t;
  t.round = config.round;
  try {  // an application trainer must not take the client down
    EvalResult e;
    Status evaluated = trainer_->Evaluate(global, &e);
    if (evaluated.ok() && std::isfinite(e.loss) && std::isfinite(e.accuracy)) t.eval = e;
    if (!evaluated.ok() && evaluated.code() != StatusCode::kFailedPrecondition)  // FailedPrecondition: cannot evaluate
      spdlog::warn("round {}: evaluating the received model failed: {}", config.round, evaluated.message());
    t.status = trainer_->Train(global, config, ctx, &t.result);
  } catch (const std::exception& e) {
    t.status = Status::Internal(std::string("trainer threw: ") + e.what());
  } catch (...) {
    t.status = Status::Internal("trainer threw a non-standard exception");
  }
  return t;
}

std::optional<Client::Impl::Trained> Client::Impl::TakeTrained() {
  std::optional<Trained> t;
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    t.swap(trained_);
  }
  if (t) {
    training_ = false;
    training_round_ = 0;
  }
  return t;
}

// Abandons the round with the worker, if any: tells it to stop and waits until the trainer
// returns (a trainer that ignores the cancel flag holds the loop until it does); its result
// is dropped.
void Client::Impl::StopTraining() {
  if (training_) {
    train_cancel_ = true;
    std::unique_lock<std::mutex> lock(work_mu_);
    work_cv_.wait(lock, [this] { return trained_.has_value(); });
    trained_.reset();
  }
  training_ = false;
  training_round_ = 0;
}

Status Client::Impl::FinishTraining(Trained t) {
  if (!t.status.ok()) {
    if (t.status.code() == StatusCode::kCancelled) return Status::Ok();
    spdlog::error("round {}: local training failed: {}", t.round, t.status.ToString());
    return Status::Ok();  // the aggregator times this client out for the round; keep serving
  }
  if (upload_ == Upload::kPartialSum) return SendPartialSum(t);
  const size_t expected = LayoutSize(welcome_->task.layout);
  if (t.result.delta.size() != expected)
    return Status::Internal("trainer returned a delta of " + std::to_string(t.result.delta.size()) +
                            " floats; the model has " + std::to_string(expected));
  runtime::Update u;
  u.author = o_.name;
  u.round = t.round;
  u.num_examples = std::max<uint64_t>(t.result.num_examples, 1);  // the aggregator refuses more than kMaxExamples
  u.delta = std::move(t.result.delta);
  u.report = protocol::UpdateReport::FromTrainer(t.result.metrics);
  u.report.eval = t.eval;
  if (upload_ == Upload::kMasked) {  // masked once this client's shares have arrived (secagg.cc)
    if (t.round == secagg_round_) {
      secagg_pending_ = std::move(u);
      SendMaskedIfReady();
    }
    return Status::Ok();
  }
  return EncodeAndSend(std::move(u));
}

// An edge aggregator's round: its clients' exact partial sum, as it is, in place of a trained
// delta (the edge's trainer only waits for its own round to close).
Status Client::Impl::SendPartialSum(const Trained& t) {
  std::optional<std::vector<uint8_t>> bytes = hooks_.partial_sum(t.round);
  if (!bytes) return Status::Ok();
  runtime::Update u;
  u.round = t.round;
  u.num_examples = t.result.num_examples;
  u.report = protocol::UpdateReport::FromTrainer(t.result.metrics);
  SendUpdatePayload(u, *bytes, "partial sum", [&](const protocol::Header& h, const protocol::ChunkRef& chunk) {
    return protocol::EncodeUpdate(h, u.num_examples, u.report, protocol::PayloadEncoding::PartialSum, chunk);
  });
  return Status::Ok();
}

// Through the upload stages (the codec, with error feedback when it has it), in the slow
// codec or the usual one by the measured upload rate; journaled, then sent.
Status Client::Impl::EncodeAndSend(runtime::Update u) {
  const uint64_t round = u.round;
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
