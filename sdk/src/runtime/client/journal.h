// A client's state across rounds, committed with the aggregator's rounds rather than with its
// own uploads (docs/PROTOCOL.md, "Client state across aggregator restarts"). What a client
// carries from one round to the next (the error-feedback residuals and transform state of its
// upload codecs, its trainer's state such as DeMo's momentum) is kept as it was before each
// round the client trains; a task for round q then settles every round kept:
//   - r >= q: the aggregator came back at an earlier round (it resumed from its checkpoint),
//     so round r was never committed: the client returns to its state before the earliest
//     such r, exactly as if those rounds never happened here;
//   - r < q, in the model: the state is dropped. An update is in the model when this
//     session's Welcome lists r among the client's committed rounds (a saved commit holds it),
//     or when it was acknowledged in this session into a commit c < q (closed, since round q's
//     task is sent) and not discarded since (an Ack with accepted = false: the commit left the
//     model unchanged);
//   - r < q, acknowledged in this session into a commit c >= q (FedBuff: it waits in the
//     buffer of the open round): kept, and settled at a later task;
//   - r < q, otherwise (never acknowledged: lost, late, refused; discarded; or sent to an
//     aggregator that has restarted since without a saved commit holding it; an aggregator
//     that keeps no record of commits, an edge, is trusted with those): its mass goes
//     back into the residual that encoded it (Codec::ReturnToResidual) for the next update to
//     carry; without error feedback it is lost, and the log says so.
// An aggregator sends round q's task only once round q-1 is closed and, with
// --checkpoint-dir, saved with the committed rounds of each client (runtime/server/rounds.cc),
// so these are as durable as the aggregator's own state.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "shoal/status.h"
#include "shoal/trainer.h"

namespace shoal::runtime {

// The state a round changes, where it lives (each may be null: no slow codec, no trainer).
struct RoundState {
  codec::Codec* codec = nullptr;       // the upload codec
  codec::Codec* slow_codec = nullptr;  // --codec-slow's, when the task has one
  bool* sent_slow = nullptr;           // which of the two the last update used
  Trainer* trainer = nullptr;
};

// What Settle did, for the log.
struct Settled {
  std::vector<uint64_t> rolled_back;  // rounds taken back (the aggregator is at an earlier one)
  std::vector<uint64_t> returned;     // rounds whose unaggregated mass went back into the residual
  std::vector<uint64_t> lost;         // rounds whose unaggregated update no residual could keep
  std::vector<uint64_t> restarted;    // of those two, the rounds sent to an aggregator that died before saving them
  size_t pending = 0;                 // rounds still in the buffer of an open commit (FedBuff)
};

class RoundJournal {
 public:
  // Before training round `round`: its state as it is now (a second call for the same round,
  // a task sent again, keeps the first).
  void Keep(uint64_t round, const RoundState& state);
  // Round `round`'s update was encoded as `payload` (by the slow codec or not), to be sent in
  // aggregator session `session`.
  void Encoded(uint64_t round, std::span<const uint8_t> payload, bool slow, uint64_t session);
  // The aggregator acknowledged round `round`'s update into the buffer of round `commit_round`.
  void Acked(uint64_t round, uint64_t commit_round);
  // ... and then discarded it (its commit left the model unchanged).
  void Discarded(uint64_t round);
  // A task for round `task_round` arrived in session `session` (before it trains): settles
  // every round kept. `committed`: the rounds this session's Welcome lists as committed
  // (increasing); null where it keeps no record of commits, and then an update sent to an
  // earlier session is taken as in the model (its Ack may have died with the process).
  // `seed` is the task's (the codec's round randomness), `author` this client's name (its
  // encoder's private seed). Errors: a state or payload this journal kept that the
  // codec or trainer refuses (a bug), with the state partly restored.
  StatusOr<Settled> Settle(uint64_t task_round, uint64_t session, const std::vector<uint64_t>* committed,
                           const RoundState& state, uint64_t seed, const std::string& author);
  // Forgets everything (the codecs or the trainer were made again for another task).
  void Clear() { rounds_.clear(); }
  size_t size() const { return rounds_.size(); }

 private:
  struct Round {
    std::vector<uint8_t> codec, slow_codec, trainer;  // the states before the round
    bool sent_slow = false;
    std::vector<uint8_t> payload;  // the encoded update, once encoded
    bool encoded = false, slow = false, acked = false, discarded = false;
    uint64_t session = 0;       // of the aggregator it was encoded for
    uint64_t commit_round = 0;  // acknowledged into this round's commit
  };
  std::map<uint64_t, Round> rounds_;
};

}  // namespace shoal::runtime
