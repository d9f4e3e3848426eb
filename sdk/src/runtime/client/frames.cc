#include "runtime/client/client_impl.h"
#include "runtime/client/policy.h"

namespace shoal {

Status Client::Impl::HandleWelcome(const protocol::Header& h, protocol::WelcomeInfo welcome) {
  protocol::WelcomeInfo* w = &welcome;
  // This client's own privacy policy first: a task below it is never trained for. The
  // aggregator is told (Bye) so it does not wait for this client.
  if (Status st = runtime::CheckTaskPrivacy(o_.privacy, w->privacy); !st.ok()) {
    (void)channel_->Send(protocol::EncodeBye({h.session, 0, w->client_id, ++sequence_}, st.message()), milliseconds(500));
    return st;
  }
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
    journal_.Clear();  // its codecs and the trainer's state start afresh
    up_codec_.reset();
    replica_.reset();
    replica_hash_.clear();
  }
  if (!up_codec_ || up_codec_->spec() != w->task.codec || down_codec_->spec() != w->task.codec_down ||
      (slow_codec_ ? slow_codec_->spec() : std::string()) != w->task.codec_slow) {
    SHOAL_RETURN_IF_ERROR(
        MakeUploadStages(w->task, w->task.codec, up_codec_, update_stages_).WithContext("cannot run the aggregator's --codec"));
    journal_.Clear();
    auto down = codec::Codec::Create(w->task.codec_down, w->task.layout);
    if (!down.ok()) return down.status().WithContext("cannot run the aggregator's --codec-down");
    down_codec_ = std::move(*down);
    slow_codec_.reset();
    slow_stages_ = runtime::UpdatePipeline();
    if (!w->task.codec_slow.empty())
      SHOAL_RETURN_IF_ERROR(MakeUploadStages(w->task, w->task.codec_slow, slow_codec_, slow_stages_)
                                .WithContext("cannot run the aggregator's --codec-slow"));
  }
  // A new registration may be a new path: measure the link again.
  heartbeats_sent_.clear();
  min_rtt_s_.reset();
  upload_mbps_.reset();
  sent_slow_ = true;
  if (w->privacy.secagg && (!secagg_ || client_id_ != w->client_id)) {
    // The identity that signs AdvertiseKeys: the long-term key of this client's key file, which
    // other clients' trusted rosters name; without a key file a fresh one per registration,
    // which binds one round's adverts together but not to anyone (docs/SECURITY.md).
    if (identity_) {
      secagg_ = std::make_unique<privacy::secagg::Client>(w->client_id, identity_->sign_secret, secagg_policy_);
    } else {
      SHOAL_ASSIGN_OR_RETURN(crypto::KeyPair fresh, crypto::GenerateKeyPair());
      secagg_ = std::make_unique<privacy::secagg::Client>(w->client_id, fresh.sign_secret, secagg_policy_);
    }
    secagg_round_ = 0;
  }
  if (hooks_.partial_sum && w->privacy.secagg)
    return Status::FailedPrecondition("the parent aggregator runs secure aggregation, which sums masked client "
                                      "updates; an edge aggregator's partial sum cannot join it (docs/DEPLOY.md, tiers)");
  upload_ = hooks_.partial_sum ? Upload::kPartialSum : w->privacy.secagg ? Upload::kMasked : Upload::kEncoded;
  session_ = h.session;
  client_id_ = w->client_id;
  welcome_ = std::move(*w);
  registered_ = true;
  registered_handshakes_ = channel_->handshakes().succeeded;
  last_server_sequence_ = h.sequence;
  ClientEvent e(ClientEvent::Kind::kConnected);
  e.message = "joined " + o_.connect + " as client " + std::to_string(client_id_) + " (model " + welcome_->task.model +
              ", " + std::to_string(LayoutSize(welcome_->task.layout)) + " parameters)";
  spdlog::debug("{}", e.message);  // the CLI shows the event itself; an embedding app may route logs
  Emit(e);
  return Status::Ok();
}

Status Client::Impl::HandleRoundTask(const protocol::Header& h, const protocol::RoundTask& t) {
  const uint64_t round = h.round;
  if (round == 0) return Status::Ok();
  const size_t n = LayoutSize(welcome_->task.layout);
  const bool new_round = round != task_round_;
  // After a Resync request the full model of the same round follows: start a fresh transfer.
  const bool resync_reply = !new_round && awaiting_full_ && t.encoding == protocol::PayloadEncoding::DenseF32;
  if (new_round || resync_reply) {
    // A new round: anything older (an unfinished transfer or training) is abandoned.
    if (new_round && training_ && training_round_ != round) StopTraining();
    task_round_ = round;
    awaiting_full_ = false;
    assembler_encoding_ = t.encoding;
    // Bound each transfer by what its encoding can need: the dense model, at most twice
    // that for a codec delta, nothing for Unchanged.
    uint64_t limit = n * sizeof(float);
    if (t.encoding == protocol::PayloadEncoding::Codec) limit = protocol::MaxCodecPayloadBytes(n);
    if (t.encoding == protocol::PayloadEncoding::Unchanged) limit = 0;
    assembler_.emplace(limit);
    if (new_round) round_started_ = Clock::now();
  }
  if (!assembler_) return Status::Ok();  // this round's model already arrived
  if (t.encoding != assembler_encoding_) {
    spdlog::warn("round {}: chunks with mixed encodings; skipping the round", round);
    assembler_.reset();
    return Status::Ok();
  }
  Status st = assembler_->Add(t.chunk);
  if (!st.ok()) {
    spdlog::warn("round {}: bad model chunk ({}); skipping the round", round, st.message());
    assembler_.reset();
    return Status::Ok();
  }
  if (!assembler_->complete()) return Status::Ok();
  std::vector<uint8_t> bytes = assembler_->Take();
  assembler_.reset();
  const std::string& want = t.model_hash;

  // Bring the replica to the round's model.
  ReceivedModel received{.round = round,
                         .delta = t.encoding == protocol::PayloadEncoding::Codec,
                         .unchanged = t.encoding == protocol::PayloadEncoding::Unchanged,
                         .payload = {},
                         .base_hash = t.base_hash,
                         .delta_round = t.delta_round,
                         .model_hash = want};
  switch (t.encoding) {
    case protocol::PayloadEncoding::DenseF32: {
      auto global = protocol::DecodeDenseF32(bytes, n);
      if (!global.ok()) {
        spdlog::warn("round {}: bad global model ({}); skipping the round", round, global.status().message());
        return Status::Ok();
      }
      SetReplica(std::move(*global));
      break;
    }
    case protocol::PayloadEncoding::Codec: {
      const std::string& base = t.base_hash;
      if (replica_size() != n || replica_hash_ != base) return RequestResync(round, "replica is not the delta's base");
      auto next = runtime::ApplyDownload(*down_codec_, welcome_->task.seed, t.delta_round, bytes, *replica_);
      if (!next.ok()) return RequestResync(round, "global delta does not decode: " + next.status().message());
      SetReplica(std::move(*next));
      if (hooks_.on_model) received.payload = std::move(bytes);
      break;
    }
    case protocol::PayloadEncoding::Unchanged:
      break;
    default:
      spdlog::warn("round {}: unknown model encoding; skipping the round", round);
      return Status::Ok();
  }
  if (replica_size() != n || replica_hash_ != want) return RequestResync(round, "model hash mismatch");

  if (!t.config) {
    spdlog::warn("round {}: {}; skipping the round", round, t.config_error);
    return Status::Ok();
  }
  const RoundConfig* config = &*t.config;
  if (hooks_.on_model) hooks_.on_model(std::move(received));
  ClientEvent e(ClientEvent::Kind::kRoundStarted);
  e.round = round;
  Emit(e);
  Reached(RoundPoint::kTask, round);
  SHOAL_RETURN_IF_ERROR(SettleRounds(round));
  StartTraining(replica_, *config);
  if (welcome_->privacy.secagg) StartSecAgg(round);
  return Status::Ok();
}

// Before training round `round`: what the earlier rounds left settled (journal.h), then this
// round's starting state kept.
Status Client::Impl::SettleRounds(uint64_t round) {
  auto settled =
      journal_.Settle(round, session_, welcome_->committed_rounds ? &*welcome_->committed_rounds : nullptr,
                      RoundStateNow(), welcome_->task.seed, o_.name);
  if (!settled.ok()) return settled.status().WithContext("round " + std::to_string(round) + ": settling earlier rounds");
  if (!settled->rolled_back.empty())
    spdlog::warn("round {}: the aggregator is back at round {} (it resumed from its checkpoint): this client returns "
                 "to its state before round {}, taking back {} round(s) it never committed",
                 round, round, settled->rolled_back.front(), settled->rolled_back.size());
  for (uint64_t r : settled->returned) {
    const bool restarted = std::count(settled->restarted.begin(), settled->restarted.end(), r);
    spdlog::info("round {}: round {}'s update is not in the model ({}); its mass returns to the error-feedback "
                 "residual", round, r,
                 restarted ? "the aggregator died before a commit it saved held it" : "left out of its round, or discarded");
  }
  for (uint64_t r : settled->lost)
    spdlog::warn("round {}: round {}'s update is not in the model, and without error feedback its work is lost",
                 round, r);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.rounds_rolled_back += settled->rolled_back.size();
    stats_.updates_returned += settled->returned.size();
  }
  journal_.Keep(round, RoundStateNow());
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
  const protocol::MessageKind kind = protocol::KindOf(v);
  auto decoded = protocol::DecodeMessage(v);
  if (!decoded.ok()) {
    if (kind == protocol::MessageKind::Welcome && !registered_)
      return decoded.status().WithContext("invalid Welcome from the aggregator");
    spdlog::warn("ignoring a malformed {} from the aggregator: {}", protocol::MessageName(kind), decoded.status().message());
    return Status::Ok();
  }
  protocol::Message& msg = *decoded;
  const protocol::Header& h = msg.header;
  spdlog::debug("received {} (round {}, sequence {})", protocol::MessageName(kind), h.round, h.sequence);

  if (auto* welcome = std::get_if<protocol::WelcomeInfo>(&msg.body)) {
    if (registered_) return Status::Ok();  // a duplicate answer to a retried Hello
    last_heard_ = Clock::now();
    return HandleWelcome(h, std::move(*welcome));
  }
  if (auto* err = std::get_if<protocol::ErrorReply>(&msg.body)) {
    const std::string& reason = err->reason;
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.errors_received;
    }
    switch (err->code) {
      case ErrorCode::VersionMismatch:
      case ErrorCode::UnsupportedCodec:
      case ErrorCode::Refused:
        if (!registered_ || h.session == session_)
          return Status::FailedPrecondition("the aggregator refused this client: " + reason);
        return Status::Ok();
      case ErrorCode::UnknownSession:
      case ErrorCode::NotRegistered:
        if (registered_) Unregister("the aggregator does not know this client (" + reason + ")");
        return Status::Ok();
      default:
        spdlog::warn("aggregator reported {}: {}", protocol::ErrorName(err->code), reason);
        last_error_ = reason;
        return Status::Ok();
    }
  }
  if (!registered_ || h.session != session_) return Status::Ok();  // stale traffic from an old session
  if (h.sequence <= last_server_sequence_) {
    spdlog::warn("ignoring a replayed or reordered frame from the aggregator (sequence {})", h.sequence);
    return Status::Ok();
  }
  last_server_sequence_ = h.sequence;
  last_heard_ = Clock::now();

  if (auto* task = std::get_if<protocol::RoundTask>(&msg.body)) return HandleRoundTask(h, *task);
  switch (kind) {
    case protocol::MessageKind::SecAggSetup:
    case protocol::MessageKind::SecAggShares:
    case protocol::MessageKind::SecAggUnmask:
    case protocol::MessageKind::SecAggUnmaskProof:
      return HandleSecAgg(h, msg);
    default:
      break;
  }
  if (auto* ack = std::get_if<protocol::Ack>(&msg.body)) {
    if (!ack->accepted) {  // an update acknowledged before, discarded by its commit
      spdlog::info("round {}: the aggregator discarded this client's update (round {} left the model unchanged)",
                   h.round, ack->commit_round);
      journal_.Discarded(h.round);
      return Status::Ok();
    }
    journal_.Acked(h.round, ack->commit_round);
    if (h.round == awaiting_ack_round_) {
      MeasureUpload();
      ClientEvent e(ClientEvent::Kind::kRoundDone);
      e.round = h.round;
      e.seconds = std::chrono::duration<double>(Clock::now() - round_started_).count();
      e.train_loss = acked_train_loss_;
      awaiting_ack_round_ = 0;
      UpdateStats();
      Emit(e);
    }
    return Status::Ok();
  }
  if (auto* bye = std::get_if<protocol::Bye>(&msg.body)) {
    ClientEvent e(ClientEvent::Kind::kFinished);
    e.message = bye->reason;
    Emit(e);
    finished_ = true;
    // Confirm, so the aggregator can stop as soon as every client has heard it.
    (void)channel_->Send(protocol::EncodeBye(NextHeader(h.round), "bye"), milliseconds(500));
    return Status::Ok();
  }
  if (std::holds_alternative<protocol::Heartbeat>(msg.body) && !heartbeats_sent_.empty()) {  // an echo: a round trip
    const double rtt = std::chrono::duration<double>(Clock::now() - heartbeats_sent_.front()).count();
    heartbeats_sent_.pop_front();
    min_rtt_s_ = min_rtt_s_ ? std::min(*min_rtt_s_, rtt) : rtt;
  }
  return Status::Ok();
}

}  // namespace shoal
