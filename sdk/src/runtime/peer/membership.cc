// Membership: joining the swarm (founding it, or through bootstrap peers), members' Joins and
// connections, heartbeats, dropping silent members and readmitting ones that come back.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "crypto/keys.h"
#include "runtime/peer/peer_impl.h"

namespace shoal::peer {

Status Peer::ConnectMember(const protocol::PeerInfo& info) {
  if (info.name == self_.name || members_.count(info.name)) return Status::Ok();
  transport::SocketOptions so;
  so.max_frame_bytes = static_cast<int64_t>(max_frame_bytes_);
  so.zmtp_heartbeat_ms = ZmtpHeartbeatMs(swarm_info_.heartbeat_timeout_ms);
  if (secure_) {
    if (info.curve_key.empty()) return Status::Protocol("member " + info.name + " has no CURVE key");
    so.curve = std::make_shared<const crypto::KeyPair>(keys_);
    SHOAL_RETURN_IF_ERROR(crypto::Z85DecodeTo(info.curve_key, so.server_key));
  }
  Member m;
  m.info = info;
  m.last_heard = Clock::now();
  SHOAL_ASSIGN_OR_RETURN(m.out, transport::ZmqChannel::Connect(ctx_, info.endpoint, so));
  members_[info.name] = std::move(m);
  IntroduceTo(members_.at(info.name));
  spdlog::info("peer {}: connecting to member {} at {}", self_.name, info.name, info.endpoint);
  return Status::Ok();
}

void Peer::IntroduceTo(Member& m) {
  if (m.joined_us) return;
  protocol::Header h = Header(m);
  if (m.out->Send(protocol::EncodeJoin(h, self_, false), milliseconds(0)).ok()) {
    m.joined_us = true;
    m.join_handshakes = m.out->handshakes().succeeded;
  } else {
    --m.out_sequence;  // not sent: the next try reuses the number
  }
}

protocol::SwarmInfo Peer::Swarm() const {
  protocol::SwarmInfo s = swarm_info_;
  s.members.clear();
  s.members.push_back(self_);
  for (const auto& [name, m] : members_)
    if (m.introduced) s.members.push_back(m.info);
  return s;
}


// Our connections to members, once per loop: handshake bookkeeping, and our Join again on a
// connection ZeroMQ remade (the member restarted, or a stalled link timed out): the member
// sees a new connection, so we introduce ourselves on it before anything else.
void Peer::ServiceConnections() {
  for (auto* group : {&members_, &departed_})
    for (auto& [name, m] : *group) {
      (void)m.out->Recv(milliseconds(0));  // DEALER bookkeeping (handshakes)
      if (m.joined_us && m.out->handshakes().succeeded > m.join_handshakes) {
        spdlog::info("peer {}: new connection to {}; sending Join again", self_.name, name);
        m.joined_us = false;
      }
      IntroduceTo(m);
    }
}

// Founding the swarm: its id, task and settings are this peer's.
Status Peer::Found() {
  swarm_ = crypto::RandomU64() | 1;
  protocol::SwarmInfo& s = swarm_info_;
  s.task = o_.task;
  s.mode = o_.mode;
  s.step_timeout_ms = o_.step_timeout_ms;
  s.heartbeat_interval_ms = o_.heartbeat_interval_ms;
  s.heartbeat_timeout_ms = o_.heartbeat_timeout_ms;
  s.chunk_bytes = o_.chunk_bytes;
  s.steps = o_.steps;
  s.params = {{"diloco_inner_steps", o_.diloco_inner_steps}, {"outer_lr", o_.diloco_outer_lr},
              {"outer_momentum", o_.diloco_outer_momentum}, {"diloco_allreduce", o_.diloco_allreduce ? 1.0 : 0.0},
              {"gossip_k", o_.gossip_k}, {"overlap", o_.overlap ? 1.0 : 0.0},
              {"eval_every", o_.eval_every}, {"min_peers", o_.min_peers}};
  if (s.step_timeout_ms == 0 || s.heartbeat_interval_ms == 0 || s.heartbeat_timeout_ms <= s.heartbeat_interval_ms)
    return Status::InvalidArgument("--heartbeat-timeout must exceed --heartbeat-interval, and timeouts be positive");
  SHOAL_ASSIGN_OR_RETURN(fit_standardization_, data::WantsStandardization(o_.standardize, o_.data.dataset));
  SHOAL_RETURN_IF_ERROR(InitTask());
  spdlog::info("peer {}: founded swarm {:016x}", self_.name, swarm_);
  return Status::Ok();
}

// `early` receives the frames that arrive before the member list (members introducing
// themselves); they are handled once the swarm is known.
//
// Every peer may be given the same bootstrap list, as users of p2p tools expect. This peer's
// own address in it (--listen or --advertise) is skipped: dialling itself would be refused as
// a name clash. Its place in the list ranks it as a founder instead: when no other listed peer
// answers within (place + 1) x kFounderWait, it founds the swarm. So peers started together
// found one swarm (the first listed founds it, the others join it as soon as it answers), a
// restarted peer rejoins the running swarm, and the next listed peer stands in for a first
// one that is down.
Status Peer::Join(const std::atomic<bool>& stop, std::vector<transport::Listener::Inbound>* early) {
  std::vector<std::string> bootstrap;
  std::optional<size_t> place;
  for (size_t i = 0; i < o_.bootstrap.size(); ++i) {
    const std::string endpoint = o_.bootstrap[i].substr(0, o_.bootstrap[i].find('@'));
    if (endpoint == o_.listen || endpoint == o_.advertise) {
      if (!place) place = i;
    } else {
      bootstrap.push_back(o_.bootstrap[i]);
    }
  }
  if (bootstrap.empty()) return Found();
  std::optional<Clock::time_point> found_at;
  if (place) found_at = Clock::now() + kFounderWait * static_cast<int>(*place + 1);
  // Joining: ask the bootstrap peers for the member list, then introduce ourselves to all.
  std::vector<std::unique_ptr<transport::Channel>> boot;
  std::vector<std::string> boot_names;
  for (const std::string& spec : bootstrap) {
    const size_t at = spec.find('@');
    const std::string endpoint = spec.substr(0, at);
    transport::SocketOptions so;
    so.max_frame_bytes = static_cast<int64_t>(max_frame_bytes_);
    if (secure_) {
      if (at == std::string::npos)
        return Status::InvalidArgument("--peers " + spec + ": with --secret-key, give each peer as ENDPOINT@KEY "
                                       "(its .pub file or Z85 key) so the connection is pinned to it");
      SHOAL_ASSIGN_OR_RETURN(std::string key, crypto::ReadPublicKey(spec.substr(at + 1)));
      SHOAL_RETURN_IF_ERROR(crypto::Z85DecodeTo(key, so.server_key));
      so.curve = std::make_shared<const crypto::KeyPair>(keys_);
    }
    SHOAL_ASSIGN_OR_RETURN(auto ch, transport::ZmqChannel::Connect(ctx_, endpoint, so));
    boot.push_back(std::move(ch));
    boot_names.push_back(endpoint);
  }
  const auto deadline = Clock::now() + milliseconds(o_.join_timeout_ms);
  auto next_try = Clock::now();
  uint64_t seq = 0;
  uint64_t early_bytes = 0;  // of the frames kept in `early`
  while (!stop.load()) {
    if (found_at && Clock::now() >= *found_at) {
      spdlog::info("peer {}: no other peer of --peers answered (this one is listed {} of {}); founding the swarm",
                   self_.name, *place + 1, o_.bootstrap.size());
      return Found();
    }
    if (!found_at && Clock::now() >= deadline)
      return Status::Unavailable("no answer from the bootstrap peers (" + bootstrap[0] + (boot.size() > 1 ? ", ..." : "") +
                                 ") within " + std::to_string(o_.join_timeout_ms / 1000) + " s");
    if (Clock::now() >= next_try) {
      for (auto& ch : boot) (void)ch->Send(protocol::EncodeJoin({0, 0, 0, ++seq}, self_, true), milliseconds(0));
      next_try = Clock::now() + milliseconds(500);
    }
    for (size_t i = 0; i < boot.size(); ++i) {
      (void)boot[i]->Recv(milliseconds(0));  // runs the handshake bookkeeping
      if (boot[i]->handshake_failures_in_a_row() >= 3)
        return transport::HandshakeFailure(*boot[i], "the peer at " + boot_names[i], self_.curve_key);
    }
    auto in = server_->Recv(milliseconds(20));
    if (!in.ok()) return in.status();
    if (!*in) continue;
    const auto v = protocol::VerifyFrame((*in)->frame.bytes(), max_frame_bytes_);
    if (!v.ok()) continue;
    const protocol::MessageKind kind = protocol::KindOf(v);
    if (kind != protocol::MessageKind::Members && kind != protocol::MessageKind::Error) {
      // Bounded by count and bytes (protocol/limits.h); what does not fit is dropped, and its
      // sender's retries or the state sync after joining bring it back.
      const uint64_t size = (*in)->frame.size();
      if (early->size() < protocol::kMaxEarlyFrames && early_bytes + size <= protocol::kMaxEarlyBytes) {
        early_bytes += size;
        early->push_back(std::move(**in));
      }
      continue;
    }
    auto answer = protocol::DecodeMessage(v);
    if (!answer.ok())
      return answer.status().WithContext(kind == protocol::MessageKind::Members ? "the swarm's member list is invalid"
                                                                                : "the swarm's refusal is malformed");
    if (auto* swarm = std::get_if<protocol::SwarmInfo>(&answer->body)) {
      swarm_ = answer->header.session;
      swarm_info_ = std::move(*swarm);
      for (const auto& m : swarm_info_.members)
        if (m.name == self_.name && m.curve_key != self_.curve_key)
          return Status::FailedPrecondition("the name '" + self_.name + "' is taken in this swarm; pick another --name");
      SHOAL_RETURN_IF_ERROR(InitTask());
      for (const auto& m : swarm_info_.members) SHOAL_RETURN_IF_ERROR(ConnectMember(m));
      spdlog::info("peer {}: joined swarm {:016x} ({} members)", self_.name, swarm_, swarm_info_.members.size());
      // The replica comes from a member (verified by hash); until then this peer only listens.
      Resync(swarm_info_.members.front().name, "joining");
      return Status::Ok();
    }
    if (auto* e = std::get_if<protocol::ErrorReply>(&answer->body))
      return Status::FailedPrecondition("the swarm refused this peer: " + e->reason);
  }
  return Status::Cancelled("stopped while joining");
}

void Peer::HandleJoin(const transport::Listener::Inbound& in, const protocol::Header& h, const protocol::Join& j) {
  const protocol::PeerInfo& info = j.self;
  if (h.session != 0 && h.session != swarm_) return Reject("", ErrorCode::UnknownSession, "Join for another swarm");
  // The key in the Join must be the one this connection authenticated with.
  if (secure_ && info.curve_key != in.user_id)
    return Reject("", ErrorCode::BadSender, "Join's key is not the connection's");
  if (info.name == self_.name) return Reject("", ErrorCode::Refused, "name '" + info.name + "' is this peer's");
  if (auto d = departed_.find(info.name); d != departed_.end()) {
    if (d->second.info.curve_key != info.curve_key)
      return Reject("", ErrorCode::Refused, "name '" + info.name + "' belongs to another key");
    departed_.erase(d);  // it rejoins afresh
  }
  auto it = members_.find(info.name);
  if (it != members_.end() && it->second.info.curve_key != info.curve_key)
    return Reject("", ErrorCode::Refused, "name '" + info.name + "' belongs to another key");
  if (it != members_.end() && it->second.info.endpoint != info.endpoint) {  // restarted elsewhere
    members_.erase(it);
    it = members_.end();
  }
  if (it == members_.end()) {
    Status st = ConnectMember(info);
    if (!st.ok()) return Reject("", ErrorCode::MalformedFrame, st.message());
    it = members_.find(info.name);
  }
  Member& m = it->second;
  // Learned from the member itself: its endpoint and signing key.
  m.info = info;
  if (!m.introduced) spdlog::info("peer {}: member {} joined ({})", self_.name, info.name, info.endpoint);
  m.introduced = true;
  m.last_heard = Clock::now();
  // One route per member: a Join on a new connection retires the old one.
  for (auto r = route_to_name_.begin(); r != route_to_name_.end();) {
    if (r->second == info.name && r->first != in.peer) {
      route_sequence_.erase(r->first);
      r = route_to_name_.erase(r);
    } else {
      ++r;
    }
  }
  route_to_name_[in.peer] = info.name;
  route_sequence_[in.peer] = h.sequence;
  IntroduceTo(m);  // if its connection is up already; the joiner repeats its request otherwise
  if (j.want_members && m.joined_us) SendTo(info.name, protocol::EncodeMembers(Header(m), Swarm()));
}

std::vector<std::string> Peer::LiveNames() const {
  std::vector<std::string> names{self_.name};
  for (const auto& [name, m] : members_)
    if (m.introduced) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

void Peer::ExpireMembers() {
  const std::string leader = Leader();
  std::vector<std::string> gone;
  for (const auto& [name, m] : members_)
    if (MillisSince(m.last_heard) > static_cast<int64_t>(swarm_info_.heartbeat_timeout_ms)) gone.push_back(name);
  for (const auto& name : gone) {
    spdlog::warn("peer {}: member {} silent for over {} ms; dropped", self_.name, name, swarm_info_.heartbeat_timeout_ms);
    Member& m = members_.at(name);
    if (m.introduced && departed_.size() < 64) {
      m.last_heard = Clock::now();  // now: when it departed
      departed_[name] = std::move(m);
    }
    members_.erase(name);
  }
  for (auto d = departed_.begin(); d != departed_.end();)
    d = MillisSince(d->second.last_heard) > kDepartedMemoryMs ? departed_.erase(d) : std::next(d);
  // A new leader re-announces its last commit, for members the old one may have missed.
  if (!gone.empty() && Leader() != leader && Leader() == self_.name && committed_ > 0 && !commit_log_.empty()) {
    spdlog::info("peer {}: now the step leader (after {})", self_.name, leader);
    const auto& [step, authors] = commit_log_.back();
    BroadcastCommit(step, authors);
  }
}

// A member dropped for silence is heard again on the route its Join came by (and, with CURVE,
// with the same key): the link stalled or the process was paused, but it is the same member.
// It is trusted again at once, with the endpoint and signing key of its earlier Join; if its
// replica moved on meanwhile, the next commit's hash check sends one side to resynchronise.
void Peer::Readmit(const std::string& name) {
  auto node = departed_.extract(name);
  Member& m = members_[name] = std::move(node.mapped());
  m.introduced = true;
  m.last_heard = Clock::now();
  ++readmitted_;
  spdlog::info("peer {}: member {} is back; readmitted", self_.name, name);
}

void Peer::Heartbeat() {
  if (MillisSince(last_heartbeat_) < static_cast<int64_t>(swarm_info_.heartbeat_interval_ms)) return;
  last_heartbeat_ = Clock::now();
  Broadcast([&](Member& m) { return protocol::EncodeHeartbeat(Header(m), false, 0.0f); });
  // Departed members hear from us too, so a member that comes back readmits us as we do it.
  for (auto& [name, m] : departed_)
    if (m.joined_us) (void)m.out->Send(protocol::EncodeHeartbeat(Header(m), false, 0.0f), milliseconds(0));
}

}  // namespace shoal::peer
