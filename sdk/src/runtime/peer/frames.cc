// Frames: every inbound frame verified, checked against its sender's route, session and
// sequence, decoded (protocol::DecodeMessage) and dispatched by kind; sending to members;
// updates as they arrive, chunk by chunk, checked against their author's signature.
#include <spdlog/spdlog.h>

#include <variant>

#include "runtime/peer/peer_impl.h"

namespace shoal::peer {

void Peer::Reject(const std::string& to, ErrorCode code, const std::string& reason) {
  ++frames_rejected_;
  ++rejected_by_code_[protocol::ErrorName(code)];
  if (ShouldLogOccurrence(frames_rejected_))
    spdlog::warn("peer {}: rejected frame #{} ({}): {}", self_.name, frames_rejected_, protocol::ErrorName(code), reason);
  if (!to.empty() && members_.count(to)) {
    Member& m = members_.at(to);
    SendTo(to, protocol::EncodeError(Header(m), code, reason));
  }
}

bool Peer::SendTo(const std::string& name, const protocol::Frame& frame) {
  auto it = members_.find(name);
  // Nothing goes to a member before our Join (the frame's sequence number would overtake it).
  if (it == members_.end() || !it->second.out || !it->second.joined_us) return false;
  // A short wait only: a dead member must not stall the loop (it is dropped at its timeout).
  Status st = it->second.out->Send(frame, milliseconds(5));
  if (st.ok()) {
    bytes_sent_ += frame.size();
    return true;
  }
  spdlog::debug("peer {}: send to {} failed: {}", self_.name, name, st.message());
  return false;
}

void Peer::Broadcast(const std::function<protocol::Frame(Member&)>& make) {
  for (auto& [name, m] : members_)
    if (m.joined_us) SendTo(name, make(m));
}

void Peer::SendUpdate(const std::string& to, uint64_t step, const std::string& author, const Update& u) {
  auto it = members_.find(to);
  if (it == members_.end()) return;
  for (const auto& chunk : protocol::SplitPayload(u.payload, swarm_info_.chunk_bytes)) {
    protocol::Header h = Header(it->second);
    h.round = step;
    SendTo(to, protocol::EncodePeerUpdate(h, author, u.base_hash, u.num_examples, u.loss, chunk, u.signature));
  }
}

void Peer::Handle(transport::Listener::Inbound& in) {
  const std::span<const uint8_t> bytes = in.frame.bytes();
  const protocol::Verified v = protocol::VerifyFrame(bytes, max_frame_bytes_);
  if (!v.ok()) return Reject("", v.error, v.reason);
  const protocol::MessageKind kind = protocol::KindOf(v);
  if (kind == protocol::MessageKind::Join) {
    auto join = protocol::DecodeMessage(v);
    if (!join.ok()) return Reject("", ErrorCode::MalformedFrame, join.status().message());
    return HandleJoin(in, join->header, std::get<protocol::Join>(join->body));
  }
  auto rit = route_to_name_.find(in.peer);
  if (rit != route_to_name_.end() && !members_.count(rit->second) && departed_.count(rit->second) &&
      (!secure_ || in.user_id == departed_.at(rit->second).info.curve_key))
    Readmit(rit->second);
  if (rit == route_to_name_.end() || !members_.count(rit->second))
    return Reject("", ErrorCode::NotMember, std::string(protocol::MessageName(kind)) + " before Join");
  const std::string& from = rit->second;
  Member& m = members_.at(from);
  if (secure_ && in.user_id != m.info.curve_key)
    return Reject(from, ErrorCode::BadSender, "this connection's key is not member " + from + "'s");
  const protocol::Header h = protocol::HeaderOf(v);
  if (h.session != swarm_) return Reject(from, ErrorCode::UnknownSession, "frame of another swarm");
  uint64_t& last = route_sequence_[in.peer];
  if (h.sequence <= last)
    return Reject(from, ErrorCode::Duplicate, "sequence " + std::to_string(h.sequence) + " is not above " + std::to_string(last));
  last = h.sequence;
  m.last_heard = Clock::now();
  auto decoded = protocol::DecodeMessage(v);  // its chunk views point into `in.frame`, alive until we return
  if (!decoded.ok()) return Reject(from, ErrorCode::MalformedFrame, decoded.status().message());
  protocol::Body& body = decoded->body;
  if (std::holds_alternative<protocol::Heartbeat>(body)) return;
  const bool ring = exchange_->finish() == Exchange::Finish::kRing;
  if (auto* u = std::get_if<protocol::PeerUpdate>(&body)) {
    if (ring) return Reject(from, ErrorCode::MalformedFrame, "this swarm's updates travel on the ring, not as PeerUpdate");
    return HandleUpdate(from, h.round, *u);
  }
  if (auto* r = std::get_if<protocol::RingSegment>(&body)) {
    if (!ring) return Reject(from, ErrorCode::MalformedFrame, "this swarm's mode has no ring");
    return HandleRingSegment(from, h.round, *r, in.frame);
  }
  if (auto* c = std::get_if<protocol::Commit>(&body)) return HandleCommit(from, h.round, std::move(*c));
  if (auto* s = std::get_if<protocol::State>(&body)) return HandleState(from, h.round, *s);
  if (auto* f = std::get_if<protocol::UpdateFetch>(&body)) {
    if (ring) return Reject(from, ErrorCode::MalformedFrame, "this swarm's updates travel on the ring; there is none to fetch");
    return HandleFetch(from, h.round, *f);
  }
  if (std::holds_alternative<protocol::StateRequest>(body)) return SendState(from);
  // A late answer to a Join request this peer repeated while waiting.
  if (std::holds_alternative<protocol::SwarmInfo>(body)) return;
  if (auto* bye = std::get_if<protocol::Bye>(&body)) {
    // A member that finished the run's last step stays a member until this peer is done too
    // and has said so (Run): this peer may still be on that step, computed with it (a ring must
    // not restart without it), and the member waits for this peer's Bye.
    const uint64_t finished = h.round > 0 ? h.round - 1 : 0;  // its last committed step
    if (bye->reason == kFinished && finished > 0) {
      spdlog::info("peer {}: member {} finished the run at step {}", self_.name, from, finished);
      m.finished_after = finished;
      return;
    }
    spdlog::info("peer {}: member {} left", self_.name, from);
    members_.erase(from);
    return;
  }
  if (auto* e = std::get_if<protocol::ErrorReply>(&body)) {
    spdlog::warn("peer {}: {} reported {}: {}", self_.name, from, protocol::ErrorName(e->code), e->reason);
    return;
  }
  return Reject(from, ErrorCode::MalformedFrame, std::string("a peer may not send ") + protocol::MessageName(kind));
}

void Peer::HandleUpdate(const std::string& from, uint64_t step, const protocol::PeerUpdate& u) {
  const std::string& author = u.author;
  // An update comes from its author, or from a member we asked for it (UpdateFetch); a fetched
  // copy that arrives after the original is simply late.
  if (author != from && !fetching_.count({step, author})) {
    auto s = updates_.find(step);
    if (s != updates_.end() && s->second.count(author) && s->second.at(author).complete) return;
    return Reject(from, ErrorCode::BadSender, "update of " + author + " sent by " + from);
  }
  // Led modes move in lockstep (one step ahead at most); the exchange says how far ahead to buffer.
  // With overlap the leader at step L holds every member's update of L, made at L-2, and
  // sends its own of L+2: two steps further.
  const uint64_t ahead = exchange_->window() + (overlap_ ? 2 : 0);
  if (step <= committed_ || step > committed_ + ahead) {
    ++rejected_by_code_["StaleStep"];  // late or far-ahead: expected under churn, not an attack
    return;
  }
  // A fetched update may be of a member dropped since (a leader that died after its commit):
  // its signing key is still known.
  const Member* m = members_.count(author) ? &members_.at(author) : nullptr;
  if (!m && author != from && departed_.count(author)) m = &departed_.at(author);
  if (!m || !m->introduced) return Reject(from, ErrorCode::NotMember, "update from " + author + ", who has not joined");
  Update& slot = updates_[step][author];
  if (slot.complete) {
    // A copy of an update already held (the original and a fetched copy can cross): ignored.
    ++rejected_by_code_["DuplicateUpdate"];
    return;
  }
  if (!slot.assembler) {  // the first chunk: its fields are the update's (DecodeMessage checked them)
    slot.assembler = std::make_unique<protocol::ChunkAssembler>(protocol::MaxCodecPayloadBytes(n_));
    slot.base_hash = u.base_hash;
    slot.num_examples = u.num_examples;
    slot.loss = u.loss;
    slot.signature = u.signature;
  }
  Status st = slot.assembler->Add(u.chunk);
  if (!st.ok()) {
    updates_[step].erase(author);
    return Reject(from, ErrorCode::MalformedFrame, st.message());
  }
  if (!slot.assembler->complete()) return;
  slot.payload = slot.assembler->Take();
  slot.assembler.reset();
  const auto digest = crypto::Hash256(slot.payload);
  const auto signed_bytes = protocol::SignedUpdateBytes(swarm_, step, author, slot.base_hash, slot.num_examples, slot.loss, digest);
  if (!crypto::Verify(slot.signature, signed_bytes, m->info.sign_key)) {
    updates_[step].erase(author);
    return Reject(from, ErrorCode::BadSignature, "update of " + author + " for step " + std::to_string(step) +
                                                     " does not verify against its signing key");
  }
  slot.payload_hash = crypto::ToHex(digest);
  slot.complete = true;
  fetching_.erase({step, author});
}

void Peer::HandleFetch(const std::string& from, uint64_t step, const protocol::UpdateFetch& f) {
  const std::string& author = f.author;
  auto s = updates_.find(step);
  if (s == updates_.end() || !s->second.count(author) || !s->second.at(author).complete) {
    spdlog::debug("peer {}: {} asked for {}'s update of step {}, which is not held", self_.name, from, author, step);
    return;
  }
  SendUpdate(from, step, author, s->second.at(author));
}

}  // namespace shoal::peer
