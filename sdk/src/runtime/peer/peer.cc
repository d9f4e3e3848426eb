// The peer's setup (identity, transport) and its event loop; RunPeer.
#include "shoal/peer.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "runtime/peer/peer_impl.h"
#include "transport/zmq/security.h"

namespace shoal {
namespace peer {

// ---- setup ----------------------------------------------------------------------------------

Status Peer::InitIdentity() {
  if (o_.advertise.empty()) o_.advertise = o_.listen;
  if (o_.advertise.find('*') != std::string::npos)
    return Status::InvalidArgument("--listen " + o_.listen + " has a wildcard: give --advertise with the address "
                                   "the other peers reach this one at");
  // The endpoints this peer listens on, is reached at, and dials (ENDPOINT@KEY: the endpoint).
  std::vector<std::pair<std::string, std::string>> endpoints = {{"--listen", o_.listen}, {"--advertise", o_.advertise}};
  for (const std::string& b : o_.bootstrap) endpoints.emplace_back("--peers", b.substr(0, b.find('@')));
  SHOAL_ASSIGN_OR_RETURN(secure_, transport::CheckSecurityFlags({.role = "peer",
                                                                 .secret_key = o_.secret_key_file,
                                                                 .others_flag = "--allow-keys",
                                                                 .others = o_.allow_keys,
                                                                 .others_what = "the peers' public keys",
                                                                 .insecure = o_.insecure,
                                                                 .endpoints = std::move(endpoints)}));
  // Updates are signed even without transport security (with a key made for this run), so a
  // relayed update still names its author; without CURVE the binding is not authenticated.
  if (secure_) {
    SHOAL_ASSIGN_OR_RETURN(keys_, crypto::ReadSecretKeyFile(o_.secret_key_file));
  } else {
    SHOAL_ASSIGN_OR_RETURN(keys_, crypto::GenerateKeyPair());
  }
  if (!protocol::ValidName(o_.name)) return Status::InvalidArgument("--name must be 1-64 printable characters");
  self_.name = o_.name;
  self_.endpoint = o_.advertise;
  self_.curve_key = secure_ ? crypto::Z85Key(keys_.curve_public) : "";
  self_.sign_key = keys_.sign_public;
  return Status::Ok();
}

Status Peer::InitTransport() {
  max_frame_bytes_ = protocol::MaxFrameBytes(o_.chunk_bytes);
  transport::SocketOptions so;
  so.max_frame_bytes = static_cast<int64_t>(max_frame_bytes_);
  so.zmtp_heartbeat_ms = ZmtpHeartbeatMs(o_.heartbeat_timeout_ms);
  if (secure_) {
    SHOAL_ASSIGN_OR_RETURN(auto allow_list, transport::LoadAllowList(o_.allow_keys, "peer"));
    SHOAL_ASSIGN_OR_RETURN(zap_, transport::ZapHandler::Start(ctx_, std::move(allow_list)));
    so.curve = std::make_shared<const crypto::KeyPair>(keys_);
  }
  SHOAL_ASSIGN_OR_RETURN(server_, transport::ZmqListener::Bind(ctx_, o_.listen, so));
  spdlog::info("peer {} listening on {} ({})", self_.name, server_->endpoint(),
               secure_ ? "CURVE, key " + self_.curve_key : "no transport security");
  return Status::Ok();
}
// ---- the loop ------------------------------------------------------------------------------

Status Peer::Run(const std::atomic<bool>& stop) {
  stop_ = &stop;
  SHOAL_RETURN_IF_ERROR(InitIdentity());
  runtime::RecorderOptions ro;
  ro.metrics_out = o_.metrics_out;
  SHOAL_ASSIGN_OR_RETURN(recorder_, runtime::Recorder::Open(std::move(ro)));
  SHOAL_RETURN_IF_ERROR(InitTransport());
  std::vector<transport::Listener::Inbound> early;
  SHOAL_RETURN_IF_ERROR(Join(stop, &early));
  for (auto& in : early) Handle(in);
  const uint64_t steps = swarm_info_.steps;
  const size_t min_peers = static_cast<size_t>(swarm_info_.Param("min_peers", 1));
  const bool led = exchange_->finish() == Exchange::Finish::kLeaderCommits;
  last_commit_time_ = Clock::now();
  while (!stop.load()) {
    SHOAL_ASSIGN_OR_RETURN(auto in, server_->Recv(milliseconds(1)));
    for (int i = 0; in && i < 256; ++i) {
      Handle(*in);
      SHOAL_ASSIGN_OR_RETURN(in, server_->Recv(milliseconds(0)));
    }
    ServiceConnections();
    ExpireMembers();
    Heartbeat();
    if (syncing_) {
      // Every member asked in turn, and none sent the model (all are syncing themselves, or
      // gone): this peer cannot take part; say so instead of waiting forever.
      const uint32_t give_up_ms = std::max(o_.join_timeout_ms, 4 * swarm_info_.step_timeout_ms);
      if (MillisSince(sync_progress_) > static_cast<int64_t>(give_up_ms))
        return Status::Unavailable("no member sent this peer the model (" + sync_reason_ + ") within " +
                                   std::to_string(give_up_ms / 1000) + " s; are the other peers still running?");
      RetrySync();
      continue;
    }
    if (steps && committed_ >= steps) break;
    if (!started_ && LiveNames().size() >= min_peers) started_ = true;
    if (!started_) continue;
    if (!train_error_.ok()) break;  // the trainer failed: leave, and say why
    if (exchange_->finish() == Exchange::Finish::kRing) {
      RingStep();
      continue;
    }
    if (!led) {
      MixStep();
      continue;
    }
    TryApplyCommits();
    if (syncing_ || (steps && committed_ >= steps)) continue;
    CheckSpeculation();
    MaybeCommit();  // with overlap the step's updates are often in already: commit before working
    LocalUpdates();
    MaybeCommit();
    Speculate();
  }
  // Leave: tell every member. After the run's last step, stay while members are still on it:
  // they may need this peer's frames (a ring's last hops still queued for a slow link, a
  // commit, an update to fetch, the state), and its queues close when it exits. They leave
  // when done, or are dropped at the heartbeat timeout. Then give the Bye a moment to go.
  const bool finished = !stop.load() && train_error_.ok() && steps && committed_ >= steps;
  Broadcast([&](Member& m) { return protocol::EncodeBye(Header(m), finished ? kFinished : "stopped"); });
  const auto linger = milliseconds(2 * std::max(swarm_info_.step_timeout_ms, swarm_info_.heartbeat_timeout_ms));
  const auto on_the_run = [&] {
    return std::any_of(members_.begin(), members_.end(), [](const auto& m) { return m.second.finished_after == 0; });
  };
  const auto serve_a_frame = [&] {
    auto in = server_->Recv(milliseconds(10));
    if (in.ok() && *in) Handle(**in);
  };
  for (const auto until = Clock::now() + linger; finished && on_the_run() && !stop.load() && Clock::now() < until;) {
    serve_a_frame();
    ServiceConnections();
    ExpireMembers();
    Heartbeat();
  }
  for (const auto until = Clock::now() + milliseconds(200); Clock::now() < until;) serve_a_frame();
  spdlog::info("peer {}: leaving after step {} ({} resyncs, {} frames rejected)", self_.name, committed_, resyncs_,
               frames_rejected_);
  return train_error_;
}

}  // namespace peer

Status RunPeer(const PeerOptions& options, const std::atomic<bool>& stop) { return RunPeer(options, nullptr, stop); }

Status RunPeer(const PeerOptions& options, std::unique_ptr<Trainer> trainer, const std::atomic<bool>& stop) {
  peer::Peer p(options, std::move(trainer));
  return p.Run(stop);
}

}  // namespace shoal
