#include "runtime/client/client_impl.h"
#include "runtime/client/policy.h"
#include "transport/zmq/security.h"

namespace shoal {

void Client::Impl::Unregister(const std::string& why) {
  if (registered_) spdlog::warn("{}; registering again", why);
  registered_ = false;
  assembler_.reset();
  task_round_ = 0;
  StopTraining();
}

namespace {

// Whether the flags ask for CURVE, or why they are refused.
StatusOr<bool> SecurityFromFlags(const ClientOptions& o) {
  return transport::CheckSecurityFlags({.role = "client",
                                        .secret_key = o.secret_key_file,
                                        .others_flag = "--server-key",
                                        .others = o.server_key,
                                        .others_what = "the aggregator's public key or .pub file",
                                        .insecure = o.insecure,
                                        .endpoints = {{"--connect", o.connect}}});
}

}  // namespace

Status ValidateClientOptions(const ClientOptions& options) {
  if (options.connect_timeout_ms == 0 || options.reconnect_timeout_ms == 0)
    return Status::InvalidArgument("timeouts must be positive");
  SHOAL_RETURN_IF_ERROR(runtime::ValidatePrivacyPolicy(options));
  return SecurityFromFlags(options).status();
}

Status Client::Impl::ConfigureSecurity(transport::SocketOptions& so) {
  SHOAL_ASSIGN_OR_RETURN(const bool secure, SecurityFromFlags(o_));
  if (!secure) return Status::Ok();
  SHOAL_ASSIGN_OR_RETURN(crypto::KeyPair keys, crypto::ReadSecretKeyFile(o_.secret_key_file));
  SHOAL_ASSIGN_OR_RETURN(std::string server_z85, crypto::ReadPublicKey(o_.server_key));
  SHOAL_RETURN_IF_ERROR(crypto::Z85DecodeTo(server_z85, so.server_key));
  public_key_ = crypto::Z85Key(keys.curve_public);
  // A trusted roster names this client by its .pub, which must be the X25519 form of the
  // Ed25519 identity it signs adverts with (shoal-keygen makes them so).
  if (!o_.privacy.trusted_roster.empty() && crypto::SignToCurvePublic(keys.sign_public) != keys.curve_public)
    return Status::InvalidArgument(o_.secret_key_file + " was made by an older shoal-keygen: its CURVE key is not "
                                   "derived from its signing key, so a trusted roster (--trusted-roster) cannot name "
                                   "it; make new keys with shoal-keygen and share the new .pub files");
  so.curve = std::make_shared<const crypto::KeyPair>(std::move(keys));
  identity_ = so.curve;
  spdlog::debug("CURVE security on: client key {}, aggregator key {}", public_key_, server_z85);
  return Status::Ok();
}

Status Client::Impl::HandshakeError() const {
  return transport::HandshakeFailure(*channel_, "the aggregator at " + o_.connect, public_key_);
}

Status Client::Impl::Start() {
  SHOAL_RETURN_IF_ERROR(runtime::ValidatePrivacyPolicy(o_));
  SHOAL_ASSIGN_OR_RETURN(secagg_policy_, runtime::SecAggPolicy(o_.privacy));
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
                                                       trainer_->name(), codec::SupportedStages(),
                                                       trainer_->standardizes() ? std::vector<std::string>{"standardize"}
                                                                                : std::vector<std::string>{}),
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
  if (registered_ && channel_->handshakes().succeeded > registered_handshakes_) {
    // A new connection (ZeroMQ reconnected a cut link): the aggregator moves the registration
    // to it on a Hello, and sends the open round's task again.
    Unregister("the connection to the aggregator was cut and made again");
    next_hello_ = Clock::now();
    give_up_at_ = Clock::now() + milliseconds(o_.reconnect_timeout_ms);
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
    if (st.ok()) {
      heartbeats_sent_.push_back(t);
      if (heartbeats_sent_.size() > 8) heartbeats_sent_.pop_front();
    }
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
    if (std::optional<Trained> done = TakeTrained()) {
      Status st = FinishTraining(std::move(*done));
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
