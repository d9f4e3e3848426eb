#include "runtime/server/service_impl.h"

namespace shoal::aggregator {

void Service::Impl::SendDirect(const std::string& peer, Frame frame) {
  auto sent = server_->Send(peer, std::make_shared<const Frame>(std::move(frame)));
  if (!sent.ok() || !*sent) spdlog::debug("reply to a peer dropped: {}", sent.ok() ? "queue full" : sent.status().message());
}

void Service::Impl::Enqueue(uint32_t id, transport::SharedFrame frame) { outbox_[id].push_back(std::move(frame)); }

// Only outboxes with frames waiting are in the map (Flush erases the empty ones), so a pass
// costs the clients with traffic, not every registered client.
bool Service::Impl::OutboxPending() const { return !outbox_.empty(); }

void Service::Impl::Flush() {
  std::vector<uint32_t> gone;
  for (auto it = outbox_.begin(); it != outbox_.end();) {
    auto& [id, q] = *it;
    auto cit = clients_.find(id);
    while (cit != clients_.end() && !q.empty()) {
      auto sent = server_->Send(cit->second.peer, q.front());
      if (!sent.ok()) {
        gone.push_back(id);
        break;
      }
      if (!*sent) break;  // the peer's queue is full: continue on a later pass
      cit->second.bytes_down += q.front()->size();
      q.pop_front();
    }
    it = (q.empty() || cit == clients_.end()) ? outbox_.erase(it) : std::next(it);
  }
  for (uint32_t id : gone) {
    // After the Bye, clients that heard it close their connections: expected, not a warning.
    spdlog::log(closing_ ? spdlog::level::debug : spdlog::level::warn, "client {} is no longer connected; dropped", id);
    DropClient(id, "disconnected");
  }
}

void Service::Impl::Reject(const std::string& peer, ErrorCode code, const std::string& reason, uint64_t round) {
  ++frames_rejected_;
  ++rejected_by_code_[protocol::ErrorName(code)];
  // Log the first few in full, then only every 1000th, so a flood cannot fill the disk.
  if (ShouldLogOccurrence(frames_rejected_))
    spdlog::warn("rejected frame #{} ({}): {}", frames_rejected_, protocol::ErrorName(code), reason);
  if (auto it = by_peer_.find(peer); it != by_peer_.end())
    Enqueue(it->second, protocol::EncodeError(Header(round), code, reason));
  else
    SendDirect(peer, protocol::EncodeError(Header(round), code, reason));
}

void Service::Impl::Handle(transport::Listener::Inbound& in) {
  std::span<const uint8_t> bytes = in.frame.bytes();
  if (auto p = by_peer_.find(in.peer); p != by_peer_.end())
    if (auto c = clients_.find(p->second); c != clients_.end()) c->second.bytes_up += bytes.size();
  // Before any byte is parsed: the connection's authenticated key must be allowed (the ZAP
  // handler checked it at the handshake, but a SIGHUP may have removed it since, and a CURVE
  // socket whose ZAP handler is gone admits any key: User-Id is then empty and refused here),
  // and a registered connection must keep the key it registered with.
  if (!KeyAllowed(in.user_id)) {
    if (auto it = by_peer_.find(in.peer); it != by_peer_.end()) DropClient(it->second, "key revoked");
    return Reject(in.peer, ErrorCode::Refused, "this client's key is not on the aggregator's allow-list");
  }
  if (auto it = by_peer_.find(in.peer); it != by_peer_.end() && clients_.at(it->second).identity != in.user_id)
    return Reject(in.peer, ErrorCode::BadSender, "this connection's key is not the one its client registered with");
  protocol::Verified v = protocol::VerifyFrame(bytes, max_frame_bytes_);
  if (!v.ok()) return Reject(in.peer, v.error, v.reason);
  auto decoded = protocol::DecodeMessage(v);
  if (!decoded.ok()) {
    const std::string why = decoded.status().message();
    Reject(in.peer, ErrorCode::MalformedFrame, why, round_.number);
    // A selected client's malformed update fails it for the round now, not at the deadline.
    if (auto it = by_peer_.find(in.peer); it != by_peer_.end() && protocol::KindOf(v) == protocol::MessageKind::Update)
      FailClient(it->second, "rejected: " + why);
    return;
  }
  protocol::Message& m = *decoded;
  const protocol::Header& h = m.header;

  if (auto* hello = std::get_if<protocol::Hello>(&m.body)) return HandleHello(in, h, *hello);
  // A Bye from a connection already dropped (it left, or vanished while its Bye was in
  // flight) needs no answer.
  if (std::holds_alternative<protocol::Bye>(m.body) && !by_peer_.count(in.peer)) return;

  // Everything else belongs to a registered client of this session.
  if (h.session != session_)
    return Reject(in.peer, ErrorCode::UnknownSession, "session is not this aggregator's (it restarted?); send Hello");
  auto pit = by_peer_.find(in.peer);
  if (pit == by_peer_.end()) return Reject(in.peer, ErrorCode::NotRegistered, "this connection has not sent Hello");
  ClientState& c = clients_.at(pit->second);
  if (h.sender != c.id)
    return Reject(in.peer, ErrorCode::BadSender,
                  "sender " + std::to_string(h.sender) + " is not this connection's client id " + std::to_string(c.id));
  if (h.sequence <= c.last_sequence)
    return Reject(in.peer, ErrorCode::Duplicate,
                  "sequence " + std::to_string(h.sequence) + " is not above " + std::to_string(c.last_sequence));
  c.last_sequence = h.sequence;
  c.last_seen = Clock::now();

  if (std::holds_alternative<protocol::Heartbeat>(m.body))
    return Enqueue(c.id, protocol::EncodeHeartbeat(Header(round_.number), false, 0.0f));
  if (auto* u = std::get_if<protocol::UpdateChunk>(&m.body)) return HandleUpdate(c, h, *u);
  if (auto* r = std::get_if<protocol::Resync>(&m.body)) return HandleResync(c, h, *r);
  switch (m.kind) {
    case protocol::MessageKind::SecAggKeys:
    case protocol::MessageKind::SecAggShareKeys:
    case protocol::MessageKind::SecAggMasked:
    case protocol::MessageKind::SecAggCheckSignature:
    case protocol::MessageKind::SecAggUnmaskShares:
      return HandleSecAgg(c, h, m);
    default:
      break;
  }
  if (const auto* bye = std::get_if<protocol::Bye>(&m.body)) {
    // The client's reason, as it gave it (a client that refuses the task says why).
    const std::string why = bye->reason.empty() ? "left" : "left: " + bye->reason.substr(0, 300);
    spdlog::info("client {} ({}) {}", c.id, c.name, why);
    return DropClient(c.id, why);
  }
  return Reject(in.peer, ErrorCode::MalformedFrame, std::string("a client may not send ") + protocol::MessageName(m.kind));
}

}  // namespace shoal::aggregator
