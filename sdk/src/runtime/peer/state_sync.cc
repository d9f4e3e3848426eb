// State sync: a peer that joins, falls behind or diverges loads the replica (the model and
// the exchange's shared state, e.g. the shared optimizer's) from a member, verified by hash;
// and a peer sends its own to a member that asks.
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>

#include "runtime/peer/peer_impl.h"

namespace shoal::peer {

void Peer::Resync(const std::string& from, const std::string& why) {
  std::string source = from;
  if (!members_.count(source)) {
    source.clear();
    for (const auto& [name, m] : members_)
      if (m.introduced || source.empty()) source = name;
  }
  if (source.empty()) return;
  if (speculation_) {  // the loaded replica replaces it
    RollBack(std::move(*speculation_));
    speculation_.reset();
  }
  spdlog::warn("peer {}: resynchronising from {}: {}", self_.name, source, why);
  if (!syncing_) sync_progress_ = Clock::now();
  syncing_ = true;
  sync_from_ = source;
  sync_reason_ = why;
  sync_started_ = Clock::now();
  state_requested_ = false;
  state_assembler_.reset();
  RequestState();
}

void Peer::RequestState() {
  auto it = members_.find(sync_from_);
  if (state_requested_ || it == members_.end() || !it->second.joined_us) return;  // retried from the loop
  SendTo(sync_from_, protocol::EncodeStateRequest(Header(it->second), sync_reason_));
  state_requested_ = true;
  sync_started_ = Clock::now();
}

void Peer::RetrySync() {
  RequestState();
  if (MillisSince(sync_started_) <= 2 * static_cast<int64_t>(swarm_info_.step_timeout_ms)) return;
  // No answer (the member may be syncing itself, or gone): ask the next member in order.
  std::string first, next;
  for (const auto& [name, m] : members_) {  // sorted by name
    if (!m.introduced) continue;
    if (first.empty()) first = name;
    if (next.empty() && name > sync_from_) next = name;
  }
  Resync(!next.empty() ? next : (!first.empty() ? first : sync_from_), "no state from " + sync_from_);
}

// The state after the last committed step: the model, then the exchange's shared state.
void Peer::SendState(const std::string& to) {
  if (syncing_) return;  // nothing verified to give yet; the requester retries elsewhere
  // A step applied ahead of its commit is not given away: the state before it is.
  const Speculation* s = speculation_ ? &*speculation_ : nullptr;
  std::vector<float> state(s ? s->w_before : w_);
  const std::vector<float> shared = s ? s->state_before : exchange_->SaveState();
  state.insert(state.end(), shared.begin(), shared.end());
  const uint64_t step = s ? s->step - 1 : committed_;
  const auto bytes_view = protocol::AsBytes(state);
  const std::string state_hash = crypto::HashHex(bytes_view);
  for (const auto& chunk : protocol::SplitPayload(bytes_view, swarm_info_.chunk_bytes)) {
    protocol::Header h = Header(members_.at(to));
    h.round = step;
    SendTo(to, protocol::EncodeState(h, s ? s->hash_before : hash_, state_hash, chunk));
  }
  spdlog::info("peer {}: sent the state after step {} to {}", self_.name, step, to);
}

void Peer::HandleState(const std::string& from, uint64_t step, const protocol::State& s) {
  if (!syncing_ || from != sync_from_) return;
  if (!state_assembler_) state_assembler_ = std::make_unique<protocol::ChunkAssembler>(4 * n_ * sizeof(float) + (1u << 20));
  Status st = state_assembler_->Add(s.chunk);
  sync_progress_ = Clock::now();
  if (!st.ok()) {
    state_assembler_.reset();
    return Reject(from, ErrorCode::MalformedFrame, st.message());
  }
  if (!state_assembler_->complete()) return;
  std::vector<uint8_t> bytes = state_assembler_->Take();
  state_assembler_.reset();
  const std::string& want_state = s.state_hash;
  const std::string& want_model = s.model_hash;
  auto bad = [&](const std::string& why) {
    Reject(from, ErrorCode::ShapeMismatch, why);
    sync_started_ = Clock::now() - milliseconds(10 * swarm_info_.step_timeout_ms);  // retry elsewhere now
  };
  if (crypto::HashHex(bytes) != want_state) return bad("state does not match its hash");
  if (bytes.size() % sizeof(float) != 0 || bytes.size() < n_ * sizeof(float)) return bad("state has the wrong size");
  std::vector<float> state(bytes.size() / sizeof(float));
  std::memcpy(state.data(), bytes.data(), bytes.size());
  std::vector<float> model(state.begin(), state.begin() + static_cast<ptrdiff_t>(n_));
  for (float x : model)
    if (!std::isfinite(x)) return bad("state holds a non-finite parameter");
  if (crypto::ModelHash(model) != want_model) return bad("state's model does not match its hash");
  st = exchange_->LoadState(std::span<const float>(state).subspan(n_));
  if (!st.ok()) return bad(st.message());
  w_ = std::move(model);
  hash_ = want_model;
  committed_ = step;
  hash_log_[committed_] = hash_;
  for (auto it = updates_.begin(); it != updates_.end();) it = it->first <= committed_ ? updates_.erase(it) : std::next(it);
  for (auto it = commits_.begin(); it != commits_.end();) it = it->first <= committed_ ? commits_.erase(it) : std::next(it);
  ring_inbox_.EraseIf([&](const RingKey& key, const RingInbound&) { return std::get<0>(key) <= committed_; });
  ring_.reset();
  own_ = Contribution();
  sent_step_ = 0;
  syncing_ = false;
  if (committed_ > 0) started_ = true;
  ++resyncs_;
  last_commit_time_ = Clock::now();
  spdlog::info("peer {}: replica loaded from {} at step {} (model {})", self_.name, from, committed_, hash_.substr(0, 16));
}

}  // namespace shoal::peer
