#include "runtime/client/journal.h"

#include <algorithm>

#include "codec/round_context.h"

namespace shoal::runtime {

void RoundJournal::Keep(uint64_t round, const RoundState& state) {
  if (rounds_.count(round)) return;
  Round& r = rounds_[round];
  if (state.codec) r.codec = state.codec->SaveState();
  if (state.slow_codec) r.slow_codec = state.slow_codec->SaveState();
  if (state.sent_slow) r.sent_slow = *state.sent_slow;
  if (state.trainer) r.trainer = state.trainer->SaveState();
}

void RoundJournal::Encoded(uint64_t round, std::span<const uint8_t> payload, bool slow, uint64_t session) {
  auto it = rounds_.find(round);
  if (it == rounds_.end()) return;  // not kept (no task for it): nothing to settle
  it->second.payload.assign(payload.begin(), payload.end());
  it->second.encoded = true;
  it->second.slow = slow;
  it->second.session = session;
}

void RoundJournal::Acked(uint64_t round, uint64_t commit_round) {
  if (auto it = rounds_.find(round); it != rounds_.end()) {
    it->second.acked = true;
    it->second.commit_round = commit_round;
  }
}

void RoundJournal::Discarded(uint64_t round) {
  if (auto it = rounds_.find(round); it != rounds_.end()) it->second.discarded = true;
}

StatusOr<Settled> RoundJournal::Settle(uint64_t task_round, uint64_t session, const std::vector<uint64_t>* committed,
                                       const RoundState& state, uint64_t seed, const std::string& author) {
  Settled out;
  // Rounds at or after the task's were never committed: back to the state before the first.
  if (auto first = rounds_.lower_bound(task_round); first != rounds_.end()) {
    const Round& r = first->second;
    if (state.codec) SHOAL_RETURN_IF_ERROR(state.codec->LoadState(r.codec).WithContext("restoring the upload codec"));
    if (state.slow_codec && !r.slow_codec.empty())
      SHOAL_RETURN_IF_ERROR(state.slow_codec->LoadState(r.slow_codec).WithContext("restoring the slow upload codec"));
    if (state.sent_slow) *state.sent_slow = r.sent_slow;
    if (state.trainer) SHOAL_RETURN_IF_ERROR(state.trainer->LoadState(r.trainer).WithContext("restoring the trainer"));
    for (auto it = first; it != rounds_.end(); ++it) out.rolled_back.push_back(it->first);
    rounds_.erase(first, rounds_.end());
  }
  // Rounds before it: in the model, still buffered, or left out (journal.h).
  std::map<uint64_t, Round> pending;
  for (auto& [round, r] : rounds_) {
    if (!r.encoded) continue;
    if (committed && std::binary_search(committed->begin(), committed->end(), round)) continue;  // a saved commit holds it
    if (r.session != session) {
      if (!committed) continue;  // an aggregator that keeps no record of commits is trusted with it
    } else if (r.acked && !r.discarded) {
      if (r.commit_round < task_round) continue;  // that commit is closed: in the model
      pending.emplace(round, std::move(r));       // still in the open round's buffer
      continue;
    }
    codec::Codec* codec = r.slow ? state.slow_codec : state.codec;
    if (!codec) continue;
    SHOAL_ASSIGN_OR_RETURN(bool kept,
                           codec->ReturnToResidual(r.payload, codec::MakeRoundContext(seed, round, codec::NameSeed(author))));
    (kept ? out.returned : out.lost).push_back(round);
    if (r.session != session) out.restarted.push_back(round);
  }
  out.pending = pending.size();
  rounds_ = std::move(pending);
  return out;
}

}  // namespace shoal::runtime
