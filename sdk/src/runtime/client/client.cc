// The client runtime: one thread runs the protocol loop (this file); local training runs on a
// worker thread so heartbeats and a Bye keep flowing while it does. The worker is one thread
// for the client's lifetime (started at the first round), so an application's trainer always
// runs on the same thread: JNI attachment, a CUDA current device and thread-locals persist.
#include "shoal/client.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "codec/codec.h"
#include "codec/round_context.h"
#include "crypto/crypto.h"
#include "crypto/keys.h"
#include "protocol/envelope.h"
#include "runtime/client/hooks.h"
#include "runtime/update.h"
#include "transport/zmq/zmq_channel.h"

namespace shoal {

using Clock = std::chrono::steady_clock;

using std::chrono::milliseconds;
using wire::ErrorCode;

class Client::Impl {
 public:
  Impl(ClientOptions o, std::unique_ptr<Trainer> t, ClientHooks hooks)
      : o_(std::move(o)), trainer_(std::move(t)), hooks_(std::move(hooks)) {
    if (o_.name.empty()) o_.name = "client-" + std::to_string(::getpid());
  }
  ~Impl() {
    StopTraining();
    {
      std::lock_guard<std::mutex> lock(work_mu_);
      quit_ = true;
    }
    work_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  Status Run();
  Status Poll(milliseconds timeout, bool* finished);
  void Cancel() {
    cancel_ = true;
    train_cancel_ = true;
  }
  Stats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }

 private:
  // One message out, with the next sequence number of this session.
  Status Send(const protocol::Frame& f, milliseconds timeout = milliseconds(2000)) {
    Status st = channel_->Send(f, timeout);
    if (st.ok()) last_sent_ = Clock::now();
    return st;
  }
  protocol::Header NextHeader(uint64_t round) { return {session_, round, client_id_, ++sequence_}; }
  void Emit(ClientEvent e) {
    if (!o_.on_event) return;
    e.bytes_sent = channel_->traffic().bytes_sent;
    e.bytes_received = channel_->traffic().bytes_received;
    o_.on_event(e);
  }
  void UpdateStats() {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.bytes_sent = channel_->traffic().bytes_sent;
    stats_.bytes_received = channel_->traffic().bytes_received;
  }

  // Transport security from the options: CURVE keys, or plain on loopback / with insecure.
  Status ConfigureSecurity(transport::SocketOptions& so);
  // The error to stop with once the handshake has failed too often.
  Status HandshakeError() const;

  // Returns a non-OK status when the client must stop (Bye is OK + finished_ = true).
  Status HandleFrame(const transport::Message& m);
  Status HandleWelcome(const wire::Envelope* env);
  Status HandleRoundTask(const wire::Envelope* env);
  Status RequestResync(uint64_t round, const std::string& why);
  Status FinishTraining();
  void StartTraining(ReplicaCache::Replica global, RoundConfig config);
  void StopTraining();
  void WorkerLoop();
  void TrainJob(std::span<const float> global, const RoundConfig& config);
  void Unregister(const std::string& why);

  ClientOptions o_;
  std::unique_ptr<Trainer> trainer_;
  ClientHooks hooks_;
  std::atomic<bool> cancel_{false};
  std::unique_ptr<zmq::context_t> ctx_;  // only for a ZeroMQ connection (not with hooks_.channel)
  std::unique_ptr<transport::Channel> channel_;
  std::string public_key_;  // this client's CURVE public key (Z85); empty without security

  // The loop (Start, then Iterate until it returns the run's result).
  Status Start();
  std::optional<Status> Iterate(milliseconds max_wait);
  std::optional<Status> result_;
  uint64_t num_examples_ = 0;
  Clock::time_point give_up_at_;
  bool ever_registered_ = false;
  milliseconds hello_backoff_{250};
  Clock::time_point next_hello_;
  Clock::time_point last_progress_event_;

  // Registration.
  bool registered_ = false;
  bool finished_ = false;
  uint64_t session_ = 0;
  uint32_t client_id_ = 0;
  uint64_t sequence_ = 0;
  uint64_t last_server_sequence_ = 0;
  std::string last_error_;  // the aggregator's last Error reason, for the give-up message
  std::optional<protocol::WelcomeInfo> welcome_;
  std::optional<TaskConfig> configured_task_;
  Clock::time_point last_heard_;
  Clock::time_point last_sent_;

  // Codecs of the task (upload: encode with error feedback; download: decode the global delta).
  std::unique_ptr<codec::Codec> up_codec_;
  std::unique_ptr<codec::Codec> down_codec_;
  // This client's copy of the global model, kept bit-identical to the aggregator's; immutable
  // once made (shared with the training job, and through hooks_.replicas with other clients).
  ReplicaCache::Replica replica_;
  std::string replica_hash_;
  size_t replica_size() const { return replica_ ? replica_->size() : 0; }
  void SetReplica(std::vector<float> model) {
    replica_hash_ = crypto::ModelHash(model);
    replica_ = hooks_.replicas ? hooks_.replicas->Intern(replica_hash_, std::move(model))
                               : std::make_shared<const std::vector<float>>(std::move(model));
  }

  // The round being received / trained.
  uint64_t task_round_ = 0;
  std::optional<protocol::ChunkAssembler> assembler_;
  wire::PayloadEncoding assembler_encoding_ = wire::PayloadEncoding::DenseF32;
  bool awaiting_full_ = false;
  Clock::time_point round_started_;
  // The training thread and the one round handed to it.
  struct Job {
    ReplicaCache::Replica global;
    RoundConfig config;
  };
  std::thread worker_;
  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::optional<Job> job_;  // guarded by work_mu_
  bool quit_ = false;       // guarded by work_mu_
  bool training_ = false;   // loop thread only: a round is with the worker and not yet collected
  std::atomic<bool> train_cancel_{false};
  std::atomic<bool> train_done_{false};  // the worker finished the round (set under work_mu_)
  std::atomic<float> progress_{0.0f};
  uint64_t training_round_ = 0;
  Status train_status_;
  TrainResult train_result_;
  std::optional<EvalResult> train_eval_;  // of the model received, before training
  runtime::UpdatePipeline update_stages_;  // what an update goes through before it is sent
  double acked_train_loss_ = 0.0;          // of the update awaiting its Ack (for the event)
  uint64_t awaiting_ack_round_ = 0;

  mutable std::mutex stats_mu_;
  Stats stats_;
};

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

void Client::Impl::Unregister(const std::string& why) {
  if (registered_) spdlog::warn("{}; registering again", why);
  registered_ = false;
  assembler_.reset();
  task_round_ = 0;
  StopTraining();
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
  const size_t expected = LayoutSize(welcome_->task.layout);
  if (train_result_.delta.size() != expected)
    return Status::Internal("trainer returned a delta of " + std::to_string(train_result_.delta.size()) +
                            " floats; the model has " + std::to_string(expected));
  // The update stages (today: the codec, with error feedback when it has it).
  runtime::Update u;
  u.author = o_.name;
  u.round = round;
  u.num_examples = std::clamp<uint64_t>(train_result_.num_examples, 1, protocol::kMaxExamples);
  u.delta = std::move(train_result_.delta);
  u.report = protocol::UpdateReport::FromTrainer(train_result_.metrics);
  u.report.eval = train_eval_;
  if (auto failed = update_stages_.Run(u)) return failed->status.WithContext("preparing the update");
  for (const auto& chunk : protocol::SplitPayload(u.payload, welcome_->chunk_bytes)) {
    Status st = Send(protocol::EncodeUpdate(NextHeader(round), u.num_examples, u.report, wire::PayloadEncoding::Codec, chunk));
    if (!st.ok()) {
      spdlog::warn("round {}: sending the update failed: {}", round, st.message());
      return Status::Ok();
    }
  }
  awaiting_ack_round_ = round;
  acked_train_loss_ = u.report.train_loss.value_or(0.0);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.rounds_trained;
  }
  return Status::Ok();
}

Status Client::Impl::HandleWelcome(const wire::Envelope* env) {
  auto w = protocol::DecodeWelcome(env->message_as_Welcome());
  if (!w.ok()) return w.status().WithContext("invalid Welcome from the aggregator");
  if (w->max_frame_bytes > o_.max_frame_bytes)
    return Status::FailedPrecondition("the aggregator's frames (" + std::to_string(w->max_frame_bytes) +
                                      " bytes) exceed this client's limit of " + std::to_string(o_.max_frame_bytes) +
                                      "; lower the aggregator's --chunk-bytes");
  // Any change of the task (after an aggregator restart with other flags) reconfigures the trainer.
  if (!configured_task_ || !(*configured_task_ == w->task)) {
    Status st;
    try {
      st = trainer_->Configure(w->task);
    } catch (const std::exception& e) {  // an application trainer must not take the client down
      st = Status::Internal(std::string("trainer threw: ") + e.what());
    } catch (...) {
      st = Status::Internal("trainer threw a non-standard exception");
    }
    SHOAL_RETURN_IF_ERROR(st.WithContext("the aggregator's task does not fit this trainer"));
    configured_task_ = w->task;
    up_codec_.reset();
    replica_.reset();
    replica_hash_.clear();
  }
  if (!up_codec_ || up_codec_->spec() != w->task.codec || down_codec_->spec() != w->task.codec_down) {
    auto up = codec::Codec::Create(w->task.codec, w->task.layout);
    if (!up.ok()) return up.status().WithContext("cannot run the aggregator's --codec");
    auto down = codec::Codec::Create(w->task.codec_down, w->task.layout);
    if (!down.ok()) return down.status().WithContext("cannot run the aggregator's --codec-down");
    up_codec_ = std::move(*up);
    down_codec_ = std::move(*down);
    update_stages_ = runtime::UpdatePipeline();
    update_stages_.Add(runtime::EncodeStage(up_codec_.get(), w->task.seed));
  }
  session_ = env->session();
  client_id_ = w->client_id;
  welcome_ = std::move(*w);
  registered_ = true;
  last_server_sequence_ = env->sequence();
  ClientEvent e(ClientEvent::Kind::kConnected);
  e.message = "joined " + o_.connect + " as client " + std::to_string(client_id_) + " (model " + welcome_->task.model +
              ", " + std::to_string(LayoutSize(welcome_->task.layout)) + " parameters)";
  spdlog::debug("{}", e.message);  // the CLI shows the event itself; an embedding app may route logs
  Emit(e);
  return Status::Ok();
}

Status Client::Impl::HandleRoundTask(const wire::Envelope* env) {
  const wire::RoundTask* t = env->message_as_RoundTask();
  const uint64_t round = env->round();
  if (round == 0) return Status::Ok();
  const size_t n = LayoutSize(welcome_->task.layout);
  const bool new_round = round != task_round_;
  // After a Resync request the full model of the same round follows: start a fresh transfer.
  const bool resync_reply = !new_round && awaiting_full_ && t->encoding() == wire::PayloadEncoding::DenseF32;
  if (new_round || resync_reply) {
    // A new round: anything older (an unfinished transfer or training) is abandoned.
    if (new_round && training_ && training_round_ != round) StopTraining();
    task_round_ = round;
    awaiting_full_ = false;
    assembler_encoding_ = t->encoding();
    // Bound each transfer by what its encoding can need: the dense model, at most twice
    // that for a codec delta, nothing for Unchanged.
    uint64_t limit = n * sizeof(float);
    if (t->encoding() == wire::PayloadEncoding::Codec) limit = protocol::MaxCodecPayloadBytes(n);
    if (t->encoding() == wire::PayloadEncoding::Unchanged) limit = 0;
    assembler_.emplace(limit);
    if (new_round) round_started_ = Clock::now();
  }
  if (!assembler_) return Status::Ok();  // this round's model already arrived
  if (t->encoding() != assembler_encoding_) {
    spdlog::warn("round {}: chunks with mixed encodings; skipping the round", round);
    assembler_.reset();
    return Status::Ok();
  }
  Status st = assembler_->Add(t->payload());
  if (!st.ok()) {
    spdlog::warn("round {}: bad model chunk ({}); skipping the round", round, st.message());
    assembler_.reset();
    return Status::Ok();
  }
  if (!assembler_->complete()) return Status::Ok();
  std::vector<uint8_t> bytes = assembler_->Take();
  assembler_.reset();
  const std::string want = t->model_hash() ? t->model_hash()->str() : "";

  // Bring the replica to the round's model.
  switch (t->encoding()) {
    case wire::PayloadEncoding::DenseF32: {
      auto global = protocol::DecodeDenseF32(bytes, n);
      if (!global.ok()) {
        spdlog::warn("round {}: bad global model ({}); skipping the round", round, global.status().message());
        return Status::Ok();
      }
      SetReplica(std::move(*global));
      break;
    }
    case wire::PayloadEncoding::Codec: {
      const std::string base = t->base_hash() ? t->base_hash()->str() : "";
      if (replica_size() != n || replica_hash_ != base) return RequestResync(round, "replica is not the delta's base");
      std::vector<float> delta(n);
      Status decoded =
          down_codec_->Decode(bytes, codec::MakeRoundContext(welcome_->task.seed, t->delta_round(), 0), delta);
      if (!decoded.ok()) return RequestResync(round, "global delta does not decode: " + decoded.message());
      for (size_t i = 0; i < n; ++i) delta[i] += (*replica_)[i];  // the next replica, as base + delta
      SetReplica(std::move(delta));
      break;
    }
    case wire::PayloadEncoding::Unchanged:
      break;
    default:
      spdlog::warn("round {}: unknown model encoding; skipping the round", round);
      return Status::Ok();
  }
  if (replica_size() != n || replica_hash_ != want) return RequestResync(round, "model hash mismatch");

  auto config = protocol::DecodeRoundConfig(t->config(), round);
  if (!config.ok()) {
    spdlog::warn("round {}: {}; skipping the round", round, config.status().message());
    return Status::Ok();
  }
  ClientEvent e(ClientEvent::Kind::kRoundStarted);
  e.round = round;
  Emit(e);
  StartTraining(replica_, *config);
  return Status::Ok();
}

Status Client::Impl::RequestResync(uint64_t round, const std::string& why) {
  spdlog::warn("round {}: {}; asking the aggregator for the full model", round, why);
  awaiting_full_ = true;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.resyncs;
  }
  Status st = Send(protocol::EncodeResync(NextHeader(round), replica_hash_));
  if (!st.ok()) spdlog::warn("round {}: resync request not sent: {}", round, st.message());
  return Status::Ok();
}

Status Client::Impl::HandleFrame(const transport::Message& m) {
  std::span<const uint8_t> bytes = m.bytes();
  protocol::Verified v = protocol::VerifyFrame(bytes, o_.max_frame_bytes);
  if (!v.ok()) {
    spdlog::warn("ignoring a bad frame from the aggregator: {}", v.reason);
    return Status::Ok();
  }
  const wire::Envelope* env = v.envelope;
  const wire::Message kind = env->message_type();
  spdlog::debug("received {} (round {}, sequence {})", protocol::MessageName(kind), env->round(), env->sequence());

  if (kind == wire::Message::Welcome) {
    if (registered_) return Status::Ok();  // a duplicate answer to a retried Hello
    last_heard_ = Clock::now();
    return HandleWelcome(env);
  }
  if (kind == wire::Message::Error) {
    const wire::Error* err = env->message_as_Error();
    const std::string reason = err->reason() ? err->reason()->str() : "";
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.errors_received;
    }
    switch (err->code()) {
      case ErrorCode::VersionMismatch:
      case ErrorCode::UnsupportedCodec:
      case ErrorCode::Refused:
        if (!registered_ || env->session() == session_)
          return Status::FailedPrecondition("the aggregator refused this client: " + reason);
        return Status::Ok();
      case ErrorCode::UnknownSession:
      case ErrorCode::NotRegistered:
        if (registered_) Unregister("the aggregator does not know this client (" + reason + ")");
        return Status::Ok();
      default:
        spdlog::warn("aggregator reported {}: {}", wire::EnumNameErrorCode(err->code()), reason);
        last_error_ = reason;
        return Status::Ok();
    }
  }
  if (!registered_ || env->session() != session_) return Status::Ok();  // stale traffic from an old session
  if (env->sequence() <= last_server_sequence_) {
    spdlog::warn("ignoring a replayed or reordered frame from the aggregator (sequence {})", env->sequence());
    return Status::Ok();
  }
  last_server_sequence_ = env->sequence();
  last_heard_ = Clock::now();

  switch (kind) {
    case wire::Message::RoundTask:
      return HandleRoundTask(env);
    case wire::Message::Ack:
      if (env->round() == awaiting_ack_round_) {
        ClientEvent e(ClientEvent::Kind::kRoundDone);
        e.round = env->round();
        e.seconds = std::chrono::duration<double>(Clock::now() - round_started_).count();
        e.train_loss = acked_train_loss_;
        awaiting_ack_round_ = 0;
        UpdateStats();
        Emit(e);
      }
      return Status::Ok();
    case wire::Message::Bye: {
      const wire::Bye* b = env->message_as_Bye();
      ClientEvent e(ClientEvent::Kind::kFinished);
      e.message = b->reason() ? b->reason()->str() : "";
      Emit(e);
      finished_ = true;
      // Confirm, so the aggregator can stop as soon as every client has heard it.
      (void)channel_->Send(protocol::EncodeBye(NextHeader(env->round()), "bye"), milliseconds(500));
      return Status::Ok();
    }
    default:
      return Status::Ok();  // Heartbeat echo: liveness only
  }
}

Status Client::Impl::ConfigureSecurity(transport::SocketOptions& so) {
  if (o_.secret_key_file.empty() != o_.server_key.empty())
    return Status::InvalidArgument(o_.server_key.empty()
                                       ? "--secret-key needs --server-key (the aggregator's public key or .pub file)"
                                       : "--server-key needs --secret-key (this client's key file from shoal-keygen)");
  if (o_.secret_key_file.empty()) {
    if (!transport::IsLoopbackEndpoint(o_.connect) && !o_.insecure)
      return Status::FailedPrecondition("--connect " + o_.connect +
                                        " is not a loopback address: give --secret-key and --server-key (the "
                                        "aggregator's public key), or pass --insecure to send unencrypted");
    if (o_.insecure) spdlog::warn("INSECURE: talking to {} without encryption or authentication", o_.connect);
    return Status::Ok();
  }
  if (o_.insecure) return Status::InvalidArgument("--insecure contradicts --secret-key; give one or the other");
  SHOAL_ASSIGN_OR_RETURN(crypto::KeyPair keys, crypto::ReadSecretKeyFile(o_.secret_key_file));
  SHOAL_ASSIGN_OR_RETURN(std::string server_z85, crypto::ReadPublicKey(o_.server_key));
  SHOAL_RETURN_IF_ERROR(crypto::Z85DecodeTo(server_z85, so.server_key));
  public_key_ = crypto::Z85Key(keys.curve_public);
  so.curve = std::make_shared<const crypto::KeyPair>(std::move(keys));
  spdlog::debug("CURVE security on: client key {}, aggregator key {}", public_key_, server_z85);
  return Status::Ok();
}

Status Client::Impl::HandshakeError() const {
  return transport::HandshakeFailure(*channel_, "the aggregator at " + o_.connect, public_key_);
}

Status Client::Impl::Start() {
  transport::SocketOptions so;
  so.max_frame_bytes = static_cast<int64_t>(o_.max_frame_bytes);
  if (hooks_.channel) {
    if (!o_.secret_key_file.empty() || !o_.server_key.empty())
      return Status::InvalidArgument("--secret-key/--server-key need a ZeroMQ connection, not " +
                                     hooks_.channel->endpoint());
    channel_ = std::move(hooks_.channel);
  } else {
    SHOAL_RETURN_IF_ERROR(ConfigureSecurity(so));
    ctx_ = std::make_unique<zmq::context_t>(1);
    SHOAL_ASSIGN_OR_RETURN(channel_, transport::ZmqChannel::Connect(*ctx_, o_.connect, so));
  }
  num_examples_ = trainer_->num_examples();
  give_up_at_ = Clock::now() + milliseconds(o_.connect_timeout_ms);
  next_hello_ = Clock::now();
  return Status::Ok();
}

Status Client::Impl::Run() {
  bool finished = false;
  Status st;
  while (!finished) st = Poll(milliseconds(1000), &finished);
  return st;
}

Status Client::Impl::Poll(milliseconds timeout, bool* finished) {
  *finished = false;
  if (!result_ && !channel_) {  // the first call (Start sets channel_, or the result)
    Status st = Start();
    if (!st.ok()) result_ = st;
  }
  const auto deadline = Clock::now() + timeout;
  while (!result_) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (auto r = Iterate(std::max(left, milliseconds(0)))) {
      StopTraining();
      if (channel_) UpdateStats();
      result_ = *r;
    }
    if (Clock::now() >= deadline) break;
  }
  if (!result_) return Status::Ok();
  *finished = true;
  return *result_;
}

// One pass of the protocol loop, waiting at most `max_wait` for a frame. Returns the run's
// final status when it is over.
std::optional<Status> Client::Impl::Iterate(milliseconds max_wait) {
  if (cancel_.load()) {
    StopTraining();
    // Tell the aggregator we are leaving so it does not wait for our update.
    if (registered_) (void)channel_->Send(protocol::EncodeBye(NextHeader(task_round_), "client cancelled"), milliseconds(500));
    return Status::Cancelled("client cancelled");
  }
  const auto now = Clock::now();
  if (!registered_) {
    if (now >= give_up_at_) {
      const double secs = (ever_registered_ ? o_.reconnect_timeout_ms : o_.connect_timeout_ms) / 1000.0;
      if (!last_error_.empty())
        return Status::Unavailable("could not join the aggregator at " + o_.connect + " within " +
                                   std::to_string(static_cast<int>(secs)) + " s; it said: " + last_error_);
      return Status::Unavailable((ever_registered_ ? "lost the aggregator at " : "no answer from the aggregator at ") +
                                 o_.connect + " for " + std::to_string(static_cast<int>(secs)) +
                                 " s; is shoal-aggregator running there, and is --connect right?");
    }
    if (now >= next_hello_) {
      session_ = 0;
      client_id_ = 0;
      Status st = channel_->Send(protocol::EncodeHello({0, 0, 0, ++sequence_}, o_.name, num_examples_,
                                                       trainer_->name(), codec::SupportedStages()),
                                 milliseconds(100));
      if (!st.ok()) spdlog::debug("hello not sent yet: {}", st.message());
      next_hello_ = now + hello_backoff_;
      hello_backoff_ = std::min(hello_backoff_ * 2, milliseconds(5000));
    }
  }

  // Poll briefly while training so a finished update goes out without delay.
  auto frame = channel_->Recv(std::min(max_wait, milliseconds(training_ ? 2 : 50)));
  if (!frame.ok()) return frame.status();
  if (o_.max_handshake_failures > 0 && channel_->handshake_failures_in_a_row() >= o_.max_handshake_failures)
    return HandshakeError();
  if (*frame) {
    const bool was_registered = registered_;
    Status st = HandleFrame(**frame);
    if (!st.ok()) return st;
    if (finished_) return Status::Ok();
    if (!was_registered && registered_) {
      ever_registered_ = true;
      hello_backoff_ = milliseconds(250);
    }
    if (was_registered && !registered_) {  // the aggregator forgot us: register again at once
      next_hello_ = Clock::now();
      give_up_at_ = Clock::now() + milliseconds(o_.reconnect_timeout_ms);
    }
  }
  if (!registered_) return std::nullopt;

  // Liveness: heartbeat while idle or training; detect a vanished aggregator.
  const auto t = Clock::now();
  if (t - last_sent_ >= milliseconds(welcome_->heartbeat_interval_ms)) {
    const bool busy = training_;
    // Never block the loop on a heartbeat: if the aggregator is away, the timeout below notices.
    Status st = Send(protocol::EncodeHeartbeat(NextHeader(task_round_), busy, busy ? progress_.load() : 0.0f),
                     milliseconds(10));
    if (!st.ok()) spdlog::debug("heartbeat not sent: {}", st.message());
  }
  if (t - last_heard_ >= milliseconds(welcome_->heartbeat_timeout_ms)) {
    ClientEvent e(ClientEvent::Kind::kReconnecting);
    e.message = "no word from the aggregator for " + std::to_string(welcome_->heartbeat_timeout_ms) + " ms";
    Emit(e);
    Unregister(e.message);
    Status st = channel_->Reset();
    if (!st.ok()) return st;
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.reconnects;
    }
    give_up_at_ = Clock::now() + milliseconds(o_.reconnect_timeout_ms);
    next_hello_ = Clock::now();
    hello_backoff_ = milliseconds(250);
    return std::nullopt;
  }
  if (training_) {
    if (train_done_.load()) {
      Status st = FinishTraining();
      if (!st.ok()) return st;
    } else if (t - last_progress_event_ >= milliseconds(100)) {
      ClientEvent e(ClientEvent::Kind::kProgress);
      e.round = training_round_;
      e.progress = progress_.load();
      Emit(e);
      last_progress_event_ = t;
    }
  }
  return std::nullopt;
}

Client::Client(ClientOptions options, std::unique_ptr<Trainer> trainer)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(trainer), ClientHooks{})) {}
Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Client> ClientFactory::Make(ClientOptions options, std::unique_ptr<Trainer> trainer, ClientHooks hooks) {
  return std::unique_ptr<Client>(
      new Client(std::make_unique<Client::Impl>(std::move(options), std::move(trainer), std::move(hooks))));
}

ReplicaCache::Replica ReplicaCache::Intern(const std::string& hash, std::vector<float> model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = by_hash_[hash];
  if (auto live = slot.lock()) return live;
  auto made = std::make_shared<const std::vector<float>>(std::move(model));
  slot = made;
  // Forget dead entries now and then, so the map stays the size of the live set.
  if (by_hash_.size() > 64) std::erase_if(by_hash_, [](const auto& kv) { return kv.second.expired(); });
  return made;
}

size_t ReplicaCache::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [hash, w] : by_hash_) n += !w.expired();
  return n;
}
Client::~Client() = default;
Status Client::Run() { return impl_->Run(); }
Status Client::Poll(uint32_t timeout_ms, bool* finished) {
  bool ignored = false;
  return impl_->Poll(milliseconds(timeout_ms), finished ? finished : &ignored);
}
void Client::Cancel() { impl_->Cancel(); }
Client::Stats Client::stats() const { return impl_->stats(); }

}  // namespace shoal
