// The step of the ring modes (allreduce; diloco with diloco_allreduce): this peer's weighted
// update goes into a ring all-reduce (ring_allreduce.h) over the live members in name order,
// and every replica applies the weighted mean through the exchange. docs/PROTOCOL.md "Ring
// all-reduce" has the rules; in short:
//   - A ring is named by the hash of its member list; hops for a ring this peer does not (yet)
//     see are kept until its view agrees, or dropped when their step is done.
//   - A member dropped (heartbeat timeout) or admitted mid-ring changes the view: the step's
//     ring restarts on the new members from this peer's own update, computed once per step.
//   - A ring without progress for RingStallMs() restarts with attempt + 1 (a lost frame);
//     a peer that sees a higher attempt of its ring joins it.
//   - The leader announces each step's model hash in a Commit; a peer whose hash differs, or
//     that sees a step finished without it (a Commit for its step, from the leader or from a
//     member that got its first hop after finishing the step; hops of a later step), for a
//     step deadline, resynchronises from that member (state_sync.cc).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/limits.h"
#include "runtime/peer/peer_impl.h"

namespace shoal::peer {
namespace {

std::string RingHash(const std::vector<std::string>& members) {
  std::string joined;
  for (const auto& m : members) joined += m + '\n';
  return crypto::HashHex({reinterpret_cast<const uint8_t*>(joined.data()), joined.size()});
}

// A hop's fields as the wire and its signature carry them (SignedRingHopBytes).
protocol::RingSegment RingFields(const std::string& hash, uint32_t attempt, const RingHop& hop) {
  return protocol::RingSegment{.ring_hash = hash, .attempt = attempt, .phase = hop.phase, .hop = hop.hop,
                               .segment = hop.segment, .contributors = hop.contributors, .weight = hop.weight,
                               .loss = hop.loss, .piece = hop.piece, .chunk = {}, .signature = {}};
}

constexpr size_t kMaxRingsKept = 8;   // distinct (step, ring, attempt) held in the inbox
constexpr size_t kRingViewSlack = 8;  // members a sender may know of that this peer does not yet

}  // namespace

// Frames are lost only when a connection breaks and comes back (a member that vanishes changes
// the view instead), and a hop of a large model on a slow link takes long: a generous bound.
int64_t Peer::RingStallMs() const {
  return std::max<int64_t>({10 * int64_t{swarm_info_.step_timeout_ms}, 4 * int64_t{swarm_info_.heartbeat_timeout_ms},
                            30000});
}

void Peer::RingStep() {
  const uint64_t step = committed_ + 1;
  if (sent_step_ != step) LocalUpdate(step);
  if (sent_step_ != step || own_.step != step) return;
  // A step that others finished without this peer (a Commit for it, or hops of a later step,
  // waiting for longer than a step deadline): its replica is behind.
  for (auto it = commits_.begin(); it != commits_.end();) it = it->first <= committed_ ? commits_.erase(it) : std::next(it);
  // A ring still receiving (the last hops of a large model on a slow link) is not behind.
  const auto deadline = static_cast<int64_t>(swarm_info_.step_timeout_ms);
  const bool moving = ring_ && ring_->step == step && MillisSince(ring_->progress) <= deadline;
  if (!moving && !commits_.empty() && MillisSince(commits_.begin()->second.since) > deadline)
    return Resync(commits_.begin()->second.from, "the swarm finished step " + std::to_string(commits_.begin()->first) +
                                                     " without this peer");
  for (const auto& [key, in] : ring_inbox_)
    if (!moving && std::get<0>(key) > step && MillisSince(in.since) > deadline)
      return Resync(in.from, in.from + " is on step " + std::to_string(std::get<0>(key)) + " already");
  const auto live = LiveNames();
  const std::string hash = RingHash(live);
  uint32_t attempt = 0;  // the highest attempt any member started on this ring
  for (auto it = ring_inbox_.lower_bound({step, hash, 0, 0, 0, 0});
       it != ring_inbox_.end() && std::get<0>(it->first) == step && std::get<1>(it->first) == hash; ++it)
    attempt = std::max(attempt, std::get<2>(it->first));
  if (!ring_ || ring_->step != step || ring_->hash != hash) {
    if (ring_ && ring_->step == step) {
      ++ring_restarts_;
      spdlog::info("peer {}: step {}: the members changed; the ring restarts on {} members", self_.name, step, live.size());
    }
    StartRing(step, live, hash, attempt);
  } else if (attempt > ring_->attempt) {
    ++ring_restarts_;
    StartRing(step, live, hash, attempt);
  } else if (MillisSince(ring_->progress) > RingStallMs()) {
    ++ring_restarts_;
    spdlog::warn("peer {}: step {}: no ring progress for {} ms; restarting it (attempt {})", self_.name, step,
                 RingStallMs(), ring_->attempt + 1);
    StartRing(step, live, hash, ring_->attempt + 1);
  }
  FlushRing();
  // Take the pieces that are in, each when it is the next of its hop (pieces of different hops
  // interleave; a hop's own come in order).
  while (ring_ && !ring_->reduce->done()) {
    auto it = ring_inbox_.lower_bound({step, hash, ring_->attempt, 0, 0, 0});
    for (; it != ring_inbox_.end() && std::get<0>(it->first) == step && std::get<1>(it->first) == hash &&
           std::get<2>(it->first) == ring_->attempt;
         ++it)
      if (it->second.complete && ring_->reduce->Next(std::get<3>(it->first), std::get<4>(it->first), std::get<5>(it->first)))
        break;
    if (it == ring_inbox_.end() || std::get<0>(it->first) != step || std::get<1>(it->first) != hash ||
        std::get<2>(it->first) != ring_->attempt)
      break;
    RingInbound in = ring_inbox_.Take(it);
    if (in.from != ring_->prev) {
      Reject(in.from, ErrorCode::BadSender, "ring hop from " + in.from + ", who is not before this peer on the ring");
      continue;
    }
    auto out = ring_->reduce->Receive(std::move(in.hop));
    if (!out.ok()) {
      Reject(in.from, ErrorCode::MalformedFrame, out.status().message());
      StartRing(step, live, hash, ring_->attempt + 1);  // the others follow the higher attempt
      ++ring_restarts_;
      return;
    }
    ring_->progress = Clock::now();
    if (*out) SendRingHop(**out);
  }
  if (ring_ && ring_->reduce->done()) FinishRing();
}

void Peer::StartRing(uint64_t step, const std::vector<std::string>& live, const std::string& hash, uint32_t attempt) {
  const size_t n = live.size();
  const size_t pos = static_cast<size_t>(std::find(live.begin(), live.end(), self_.name) - live.begin());
  if (!ring_ || ring_->step != step) ring_started_ = Clock::now();  // restarts count in the step's ring time
  ring_ = std::make_unique<RingRun>();
  ring_->step = step;
  ring_->hash = hash;
  ring_->attempt = attempt;
  ring_->members = live;
  ring_->prev = live[(pos + n - 1) % n];
  ring_->next = live[(pos + 1) % n];
  ring_->progress = Clock::now();
  ring_->reduce = std::make_unique<RingAllReduce>(n, pos, own_.values, own_.weight, own_.loss, ring_codec_.get(),
                                                  protocol::kRingPieceValues);
  // Hops of this step's older attempts, or of rings this peer has left, are of no use.
  ring_inbox_.EraseIf([&](const RingKey& key, const RingInbound&) {
    return std::get<0>(key) == step && std::get<1>(key) == hash && std::get<2>(key) < attempt;
  });
  auto first = ring_->reduce->Start();
  if (!first.ok()) {  // encoding our own finite values cannot fail; say so if it does
    train_error_ = first.status().WithContext("step " + std::to_string(step) + ": the ring's first hop");
    return;
  }
  for (RingHop& piece : *first) ring_->outbox.push_back(std::move(piece));
  FlushRing();
}

void Peer::SendRingHop(RingHop hop) {
  ring_->outbox.push_back(std::move(hop));
  FlushRing();
}

// Sends what the outbox holds, chunk by chunk, while the next member's connection takes it
// (frames are encoded at sending, so their sequence numbers stay in order with heartbeats).
void Peer::FlushRing() {
  while (ring_ && !ring_->outbox.empty()) {
    auto it = members_.find(ring_->next);
    if (it == members_.end()) return;  // gone: the view changes, and the ring restarts
    const RingHop& hop = ring_->outbox.front();
    protocol::RingSegment r = RingFields(ring_->hash, ring_->attempt, hop);
    if (ring_->next_chunk == 0)  // each piece signed once, by this member (docs/SECURITY.md)
      ring_->out_signature = crypto::Sign(
          protocol::SignedRingHopBytes(swarm_, ring_->step, self_.name, r, crypto::Hash256(hop.payload)), keys_.sign_secret);
    r.signature = ring_->out_signature;
    const auto chunks = protocol::SplitPayload(hop.payload, swarm_info_.chunk_bytes);
    for (; ring_->next_chunk < chunks.size(); ++ring_->next_chunk) {
      protocol::Header h = Header(it->second);
      h.round = ring_->step;
      if (!SendTo(ring_->next, protocol::EncodeRingSegment(h, r, chunks[ring_->next_chunk]))) {
        --it->second.out_sequence;  // not sent: the number is reused
        return;
      }
    }
    ring_->outbox.pop_front();
    ring_->next_chunk = 0;
  }
}

// The ring is done: the replica takes the exchange's step on the weighted mean; the leader
// announces the model hash.
void Peer::FinishRing() {
  const auto started = Clock::now();
  ring_seconds_ = std::chrono::duration<double>(started - ring_started_).count();
  const uint64_t step = ring_->step;
  const size_t members = ring_->members.size();
  const double weight = ring_->reduce->weight();
  std::vector<float> mean = ring_->reduce->sum();
  for (float& x : mean) x = static_cast<float>(static_cast<double>(x) / weight);
  const double loss = ring_->reduce->loss() / weight;
  ring_.reset();
  own_ = Contribution();
  if (Status st = CommitStep(step, std::move(mean), started); !st.ok()) {
    train_error_ = st;  // every replica took the same step: the swarm cannot go on
    return;
  }
  ring_inbox_.EraseIf([&](const RingKey& key, const RingInbound&) { return std::get<0>(key) <= step; });
  if (Leader() == self_.name)
    Broadcast([&](Member& m) {
      protocol::Header h = Header(m);
      h.round = step;
      return protocol::EncodeCommit(h, {}, {}, hash_);
    });
  // The leader's commit may have come first.
  auto c = commits_.find(step);
  if (c != commits_.end()) {
    const PendingCommit commit = std::move(c->second);
    commits_.erase(c);
    if (commit.model_hash != hash_) {
      ++divergences_;
      FinishStep(step, members, loss, -1.0);
      return Resync(commit.from, "model hash " + hash_.substr(0, 16) + " after step " + std::to_string(step) +
                                     " differs from " + commit.from + "'s " + commit.model_hash.substr(0, 16));
    }
  }
  FinishStep(step, members, loss, -1.0);
}

void Peer::HandleRingSegment(const std::string& from, uint64_t step, const protocol::RingSegment& r,
                             const transport::Message& frame) {
  // While syncing, this peer's step is unknown: keep later hops (pruned to the newest rings).
  if (step <= committed_ || (!syncing_ && step > committed_ + 2)) {
    ++rejected_by_code_["StaleStep"];  // a ring this peer finished, or far ahead: expected under churn
    // The sender (re)started a ring for a step this peer has finished (the member that left
    // mid-ring had passed this peer the last hops): say so once per attempt, with the step's
    // model hash, and the sender resynchronises.
    auto done = hash_log_.find(step);
    if (r.phase == 0 && r.hop == 0 && r.piece == 0 && done != hash_log_.end() && members_.count(from)) {
      protocol::Header h = Header(members_.at(from));
      h.round = step;
      SendTo(from, protocol::EncodeCommit(h, {}, {}, done->second));
    }
    return;
  }
  // A ring has as many hops and segments as members: this peer's view, plus members joining
  // that it has not heard yet. More is made up, and would cost memory.
  const size_t bound = members_.size() + 1 + kRingViewSlack;
  if (r.hop >= bound || r.segment >= bound)
    return Reject(from, ErrorCode::MalformedFrame, "ring hop " + std::to_string(r.hop) + " or segment " +
                                                       std::to_string(r.segment) + " exceeds the swarm's size");
  if (r.piece > n_ / protocol::kRingPieceValues)
    return Reject(from, ErrorCode::MalformedFrame, "ring piece " + std::to_string(r.piece) + " exceeds the model's pieces");
  // Before any slot is made for it: a hop of a ring this peer can place comes from the member
  // before it, and no member has this peer hold more than its bound.
  if (auto prev = RingPredecessor(step, r.ring_hash); prev && from != *prev)
    return Reject(from, ErrorCode::BadSender, "ring hop from " + from + ", who is not before this peer on the ring");
  const uint64_t cap = protocol::MaxRingBytesPerSender(n_);
  if (ring_inbox_.held(from) + r.chunk.data.size() > cap)
    return Reject(from, ErrorCode::MalformedFrame,
                  "ring hops from " + from + " would hold more than " + std::to_string(cap) + " bytes here");
  const RingKey key{step, r.ring_hash, r.attempt, r.phase, r.hop, r.piece};
  RingInbound& slot = ring_inbox_[key];
  if (slot.complete) {
    ++rejected_by_code_["DuplicateUpdate"];
    return;
  }
  // A piece holds at most kRingPieceValues values: bound what its chunks may add up to.
  const uint64_t max_bytes = protocol::MaxCodecPayloadBytes(std::min<uint64_t>(n_, protocol::kRingPieceValues));
  if (!slot.assembler) {
    slot.from = from;
    slot.since = Clock::now();
    slot.assembler = std::make_unique<protocol::ChunkAssembler>(max_bytes);
    slot.hop = RingHop{.phase = r.phase, .hop = r.hop, .segment = r.segment, .contributors = r.contributors,
                       .weight = r.weight, .loss = r.loss, .payload = {}, .piece = r.piece};
    slot.signature = r.signature;
  } else if (slot.from != from) {
    return Reject(from, ErrorCode::BadSender, "ring hop already under way from " + slot.from);
  }
  if (ring_ && ring_->step == step) ring_->progress = Clock::now();  // a slow link, but moving
  // A piece in one chunk (the usual case: a piece is far below a chunk) is kept where it
  // arrived, when that is the frame itself (not the aligned copy VerifyFrame may make).
  const auto frame_bytes = frame.bytes();
  const bool in_frame = frame.owner() && r.chunk.data.data() >= frame_bytes.data() &&
                        r.chunk.data.data() + r.chunk.data.size() <= frame_bytes.data() + frame_bytes.size();
  auto whole = protocol::ChunkAssembler::Whole(r.chunk, max_bytes);
  Status st = whole.status();
  if (st.ok() && *whole && in_frame && slot.assembler->received() == 0) {
    slot.hop.payload = HopPayload(**whole, frame.owner());
    slot.assembler.reset();
  } else {
    if (st.ok()) st = slot.assembler->Add(r.chunk);
    if (!st.ok()) {
      ring_inbox_.erase(key);
      return Reject(from, ErrorCode::MalformedFrame, st.message());
    }
    ring_inbox_.Hold(slot, slot.assembler->held_bytes());
    if (!slot.assembler->complete()) return PruneRingInbox();
    slot.hop.payload = slot.assembler->Take();
    slot.assembler.reset();
  }
  ring_inbox_.Hold(slot, slot.hop.payload.size());
  // The whole piece, as its sender signed it.
  const auto fields = RingFields(r.ring_hash, r.attempt, slot.hop);
  if (!crypto::Verify(slot.signature,
                      protocol::SignedRingHopBytes(swarm_, step, from, fields, crypto::Hash256(slot.hop.payload)),
                      members_.at(from).info.sign_key)) {
    ring_inbox_.erase(key);
    return Reject(from, ErrorCode::BadSignature, "ring hop of step " + std::to_string(step) + " from " + from +
                                                     " does not verify against its signing key");
  }
  slot.complete = true;
  PruneRingInbox();
}

std::optional<std::string> Peer::RingPredecessor(uint64_t step, const std::string& hash) const {
  if (ring_ && ring_->step == step && ring_->hash == hash) return ring_->prev;
  const auto live = LiveNames();
  if (RingHash(live) != hash) return std::nullopt;
  const auto self = std::find(live.begin(), live.end(), self_.name);
  if (self == live.end()) return std::nullopt;
  const size_t pos = static_cast<size_t>(self - live.begin()), n = live.size();
  return live[(pos + n - 1) % n];
}

// Keeps the hops of the kMaxRingsKept newest (step, ring, attempt) only: a member whose view
// differs for long, or a flood of made-up rings, costs bounded memory.
void Peer::PruneRingInbox() {
  std::set<std::tuple<uint64_t, uint32_t, std::string>> rings;  // newest last
  for (const auto& [key, in] : ring_inbox_) rings.insert({std::get<0>(key), std::get<2>(key), std::get<1>(key)});
  while (rings.size() > kMaxRingsKept) {
    // A named copy, not a structured binding: clang 14 (scripts/fuzz) cannot capture one.
    const std::tuple<uint64_t, uint32_t, std::string> oldest = *rings.begin();
    rings.erase(rings.begin());
    ring_inbox_.EraseIf([&](const RingKey& key, const RingInbound&) {
      return std::get<0>(key) == std::get<0>(oldest) && std::get<1>(key) == std::get<2>(oldest) &&
             std::get<2>(key) == std::get<1>(oldest);
    });
  }
}

}  // namespace shoal::peer
