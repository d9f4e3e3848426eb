// The client runtime: one thread runs the protocol loop (this file); local training runs on a
// worker thread so heartbeats and a Bye keep flowing while it does.
#include "shoal/client.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>

#include "crypto/crypto.h"
#include "protocol/envelope.h"
#include "transport/channel.h"

namespace shoal {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using wire::ErrorCode;

class Client::Impl {
 public:
  Impl(ClientOptions o, std::unique_ptr<Trainer> t) : o_(std::move(o)), trainer_(std::move(t)) {
    if (o_.name.empty()) o_.name = "client-" + std::to_string(::getpid());
  }
  ~Impl() { StopTraining(); }

  Status Run();
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

  // Returns a non-OK status when the client must stop (Bye is OK + finished_ = true).
  Status HandleFrame(const zmq::message_t& m);
  Status HandleWelcome(const wire::Envelope* env);
  Status HandleRoundTask(const wire::Envelope* env);
  Status FinishTraining();
  void StartTraining(std::vector<float> global, RoundConfig config);
  void StopTraining();
  void Unregister(const std::string& why);

  ClientOptions o_;
  std::unique_ptr<Trainer> trainer_;
  std::atomic<bool> cancel_{false};
  zmq::context_t ctx_{1};
  std::unique_ptr<transport::ClientChannel> channel_;

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

  // The round being received / trained.
  uint64_t task_round_ = 0;
  std::optional<protocol::ChunkAssembler> assembler_;
  Clock::time_point round_started_;
  std::thread worker_;
  std::atomic<bool> train_cancel_{false};
  std::atomic<bool> train_done_{false};
  std::atomic<float> progress_{0.0f};
  uint64_t training_round_ = 0;
  Status train_status_;
  TrainResult train_result_;
  uint64_t awaiting_ack_round_ = 0;

  mutable std::mutex stats_mu_;
  Stats stats_;
};

void Client::Impl::StartTraining(std::vector<float> global, RoundConfig config) {
  StopTraining();
  train_cancel_ = cancel_.load();
  train_done_ = false;
  progress_ = 0.0f;
  training_round_ = config.round;
  worker_ = std::thread([this, global = std::move(global), config] {
    TrainContext ctx;
    ctx.progress = [this](float p) { progress_.store(std::clamp(p, 0.0f, 1.0f)); };
    ctx.cancel = &train_cancel_;
    TrainResult result;
    Status st;
    try {
      st = trainer_->Train(global, config, ctx, &result);
    } catch (const std::exception& e) {  // an application trainer must not take the client down
      st = Status::Internal(std::string("trainer threw: ") + e.what());
    }
    train_status_ = st;
    train_result_ = std::move(result);
    train_done_ = true;
  });
}

void Client::Impl::StopTraining() {
  if (worker_.joinable()) {
    train_cancel_ = true;
    worker_.join();
  }
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
  worker_.join();
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
  if (train_result_.num_examples == 0) train_result_.num_examples = 1;
  auto bytes = protocol::AsBytes(train_result_.delta);
  for (const auto& chunk : protocol::SplitPayload(bytes, welcome_->chunk_bytes)) {
    Status st = Send(protocol::EncodeUpdate(NextHeader(round), train_result_.num_examples, train_result_.metrics, chunk));
    if (!st.ok()) {
      spdlog::warn("round {}: sending the update failed: {}", round, st.message());
      return Status::Ok();
    }
  }
  awaiting_ack_round_ = round;
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
    }
    SHOAL_RETURN_IF_ERROR(st.WithContext("the aggregator's task does not fit this trainer"));
    configured_task_ = w->task;
  }
  session_ = env->session();
  client_id_ = w->client_id;
  welcome_ = std::move(*w);
  registered_ = true;
  last_server_sequence_ = env->sequence();
  ClientEvent e(ClientEvent::Kind::kConnected);
  e.message = "joined " + o_.connect + " as client " + std::to_string(client_id_) + " (model " + welcome_->task.model +
              ", " + std::to_string(LayoutSize(welcome_->task.layout)) + " parameters)";
  Emit(e);
  return Status::Ok();
}

Status Client::Impl::HandleRoundTask(const wire::Envelope* env) {
  const wire::RoundTask* t = env->message_as_RoundTask();
  const uint64_t round = env->round();
  if (round == 0) return Status::Ok();
  if (round != task_round_) {
    // A new round: anything older (an unfinished transfer or training) is abandoned.
    if (worker_.joinable() && training_round_ != round) StopTraining();
    task_round_ = round;
    assembler_.emplace(LayoutSize(welcome_->task.layout) * sizeof(float));
    round_started_ = Clock::now();
  }
  if (!assembler_) return Status::Ok();  // this round's model already arrived
  if (t->encoding() != wire::PayloadEncoding::DenseF32) {
    spdlog::warn("round {}: unsupported model encoding; skipping the round", round);
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
  auto global = protocol::DecodeDenseF32(bytes, LayoutSize(welcome_->task.layout));
  if (!global.ok()) {
    spdlog::warn("round {}: bad global model ({}); skipping the round", round, global.status().message());
    return Status::Ok();
  }
  const std::string hash = crypto::ModelHash(*global);
  if (!t->model_hash() || t->model_hash()->str() != hash) {
    spdlog::warn("round {}: model hash mismatch (got {}); skipping the round", round, hash);
    return Status::Ok();
  }
  auto config = protocol::DecodeRoundConfig(t->config(), round);
  if (!config.ok()) {
    spdlog::warn("round {}: {}; skipping the round", round, config.status().message());
    return Status::Ok();
  }
  ClientEvent e(ClientEvent::Kind::kRoundStarted);
  e.round = round;
  Emit(e);
  StartTraining(std::move(*global), *config);
  return Status::Ok();
}

Status Client::Impl::HandleFrame(const zmq::message_t& m) {
  std::span<const uint8_t> bytes(static_cast<const uint8_t*>(m.data()), m.size());
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
        for (const auto& [name, value] : train_result_.metrics)
          if (name == "train_loss") e.train_loss = value;
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

Status Client::Impl::Run() {
  transport::SocketOptions so;
  so.max_frame_bytes = static_cast<int64_t>(o_.max_frame_bytes);
  SHOAL_ASSIGN_OR_RETURN(channel_, transport::ClientChannel::Connect(ctx_, o_.connect, so));

  const uint64_t num_examples = trainer_->num_examples();
  auto give_up_at = Clock::now() + milliseconds(o_.connect_timeout_ms);
  bool ever_registered = false;
  milliseconds hello_backoff(250);
  Clock::time_point next_hello = Clock::now();
  Clock::time_point last_progress_event;

  while (!cancel_.load()) {
    const auto now = Clock::now();
    if (!registered_) {
      if (now >= give_up_at) {
        StopTraining();
        const double secs = (ever_registered ? o_.reconnect_timeout_ms : o_.connect_timeout_ms) / 1000.0;
        if (!last_error_.empty())
          return Status::Unavailable("could not join the aggregator at " + o_.connect + " within " +
                                     std::to_string(static_cast<int>(secs)) + " s; it said: " + last_error_);
        return Status::Unavailable((ever_registered ? "lost the aggregator at " : "no answer from the aggregator at ") +
                                   o_.connect + " for " + std::to_string(static_cast<int>(secs)) +
                                   " s; is shoal-aggregator running there, and is --connect right?");
      }
      if (now >= next_hello) {
        session_ = 0;
        client_id_ = 0;
        Status st = channel_->Send(protocol::EncodeHello({0, 0, 0, ++sequence_}, o_.name, num_examples,
                                                         trainer_->name()),
                                   milliseconds(100));
        if (!st.ok()) spdlog::debug("hello not sent yet: {}", st.message());
        next_hello = now + hello_backoff;
        hello_backoff = std::min(hello_backoff * 2, milliseconds(5000));
      }
    }

    // Poll briefly while training so a finished update goes out without delay.
    SHOAL_ASSIGN_OR_RETURN(auto frame, channel_->Recv(milliseconds(worker_.joinable() ? 2 : 50)));
    if (frame) {
      const bool was_registered = registered_;
      SHOAL_RETURN_IF_ERROR(HandleFrame(*frame));
      if (finished_) break;
      if (!was_registered && registered_) {
        ever_registered = true;
        hello_backoff = milliseconds(250);
      }
      if (was_registered && !registered_) {  // the aggregator forgot us: register again at once
        next_hello = Clock::now();
        give_up_at = Clock::now() + milliseconds(o_.reconnect_timeout_ms);
      }
    }
    if (!registered_) continue;

    // Liveness: heartbeat while idle or training; detect a vanished aggregator.
    const auto t = Clock::now();
    if (t - last_sent_ >= milliseconds(welcome_->heartbeat_interval_ms)) {
      const bool busy = worker_.joinable();
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
      SHOAL_RETURN_IF_ERROR(channel_->Reset());
      {
        std::lock_guard<std::mutex> lock(stats_mu_);
        ++stats_.reconnects;
      }
      give_up_at = Clock::now() + milliseconds(o_.reconnect_timeout_ms);
      next_hello = Clock::now();
      hello_backoff = milliseconds(250);
      continue;
    }
    if (worker_.joinable()) {
      if (train_done_.load()) {
        SHOAL_RETURN_IF_ERROR(FinishTraining());
      } else if (t - last_progress_event >= milliseconds(100)) {
        ClientEvent e(ClientEvent::Kind::kProgress);
        e.round = training_round_;
        e.progress = progress_.load();
        Emit(e);
        last_progress_event = t;
      }
    }
  }
  StopTraining();
  UpdateStats();
  if (finished_) return Status::Ok();
  // Tell the aggregator we are leaving so it does not wait for our update.
  if (registered_) (void)channel_->Send(protocol::EncodeBye(NextHeader(task_round_), "client cancelled"), milliseconds(500));
  return Status::Cancelled("client cancelled");
}

Client::Client(ClientOptions options, std::unique_ptr<Trainer> trainer)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(trainer))) {}
Client::~Client() = default;
Status Client::Run() { return impl_->Run(); }
void Client::Cancel() { impl_->Cancel(); }
Client::Stats Client::stats() const { return impl_->stats(); }

}  // namespace shoal
