// Exchange: what a peer's mode (shoal/peer.h: allgather, allreduce, diloco, gossip) decides, chosen once
// at start by MakeExchange; one algorithm per file under exchanges/. The peer core
// (membership, frames, commit log, state sync) is the same for every mode.
//
// A step, for every mode:
//   1. local work: trainer.Train(replica, Round(step)) with the trainer configured for
//      TrainerTask(swarm's task); Outgoing() turns its delta into what this peer sends;
//   2. the update goes, encoded and signed, to Recipients(self, step, live);
//   3. the step's updates go into Start(step, replica)'s accumulator (the aggregator's
//      Accumulator: exact, order-independent sums), each with Weight(its examples), in
//      canonical order, and Apply() moves the replica by the accumulator's result.
// With kLeaderCommits the step leader decides which updates step 3 takes and every replica
// applies the same ones (bit-identical replicas, checked by hash); with kLocalMix each peer
// takes the updates it received itself (its own model first), and replicas differ. With kRing
// steps 2 and 3 are a ring all-reduce of Weight x delta over every live member (ring.cc), and
// Apply() takes the weighted mean; every replica ends with the same bits (checked by hash
// against the leader's Commit).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aggregate/strategy.h"
#include "protocol/peer.h"
#include "shoal/trainer.h"

namespace shoal::peer {

class Exchange {
 public:
  enum class Finish { kLeaderCommits, kLocalMix, kRing };
  virtual ~Exchange() = default;
  virtual Finish finish() const = 0;

  // ---- local work (Trainer::Train, once per step)
  // The task the trainer is configured with: the swarm's, with the local optimizer this mode
  // runs (allgather: one plain SGD step of lr 1, so the delta is minus the gradient).
  virtual TaskConfig TrainerTask(const TaskConfig& swarm) const = 0;
  // The round the trainer runs at `step`, starting from the replica.
  virtual RoundConfig Round(uint64_t step) const = 0;
  // What this peer sends from the trainer's delta (w_local - replica). Default: the delta.
  // May move the replica (then sets *moved): gossip's peers send, and then mix, their local
  // model replica + delta.
  virtual std::vector<float> Outgoing(std::vector<float>& replica, std::vector<float> delta, bool* moved) const {
    return delta;
  }

  // ---- who hears whom
  // The members `who` sends its update of `step` to, from `live` (sorted, `who` among them).
  // Default: every other live member.
  virtual std::vector<std::string> Recipients(const std::string& who, uint64_t step,
                                              const std::vector<std::string>& live) const;
  // Updates are buffered for steps up to this far past the last committed one.
  virtual uint64_t window() const { return 2; }

  // ---- the step's result
  // A fresh accumulator for `step`'s updates, which are against `replica`.
  virtual StatusOr<std::unique_ptr<aggregator::Accumulator>> Start(uint64_t step, std::span<const float> replica) = 0;
  // Whether the step's result depends on its updates only through their weighted mean (a
  // shared optimizer on the mean, DeMo's sign of it): the updates of a codec with a linear
  // transform may then be summed in the transform domain (runtime/transform_sum.h) and reach
  // the accumulator as that one mean, with weight 1.
  virtual bool takes_the_mean() const { return false; }
  // The weight of an update with `num_examples` in the accumulator. Default: its examples.
  virtual uint64_t Weight(uint64_t num_examples) const { return num_examples; }
  // Moves the replica by the accumulator's result (nullopt: nothing was added; keep it).
  virtual Status Apply(const std::optional<std::vector<float>>& result, std::vector<float>& replica) = 0;

  // ---- state that travels with the replica in a state transfer (a shared optimizer's)
  virtual std::vector<float> SaveState() const { return {}; }
  virtual Status LoadState(std::span<const float> state) {
    return state.empty() ? Status::Ok() : Status::InvalidArgument("state has the wrong size");
  }
};

// The exchange of swarm.mode for a model of `layout`: InvalidArgument for an unknown mode or a
// task the mode cannot run (diloco or gossip with the demo optimizer).
StatusOr<std::unique_ptr<Exchange>> MakeExchange(const protocol::SwarmInfo& swarm, const std::vector<TensorSpec>& layout);

}  // namespace shoal::peer
