// The shared step of the modes whose replicas stay bit-identical (allgather, allreduce,
// diloco): the accumulator the aggregator's own strategy makes (the commit log's modes), and
// how the step's result (that accumulator's, or the ring all-reduce's weighted mean) moves
// every replica.
//   mean + optimizer  the "fedavg" strategy's WeightedMean of the deltas, then a shared
//                     optimizer on the host steps against its gradient, minus that mean
//                     (negation is exact): allgather's sgd/adamw on the mean gradient,
//                     diloco's outer Nesterov on the mean pseudo-gradient. Its state travels
//                     with the replica in a state transfer.
//   sign of the sum   the "demo" strategy's SignOfMean, lr * sign(sum n_k delta_k), added:
//                     DeMo peers send -Q, so w = w - lr * sign(sum n_k Q_k). With DeMo's
//                     codec (a DCT) the peer sums the updates' coefficients and transforms
//                     their mean back once (takes_the_mean), so the sign is that mean's.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "aggregate/strategy.h"
#include "backend/backend.h"
#include "nn/optimizer.h"
#include "runtime/peer/exchange.h"

namespace shoal::peer {

class SharedStepExchange : public Exchange {
 public:
  Finish finish() const override { return ring_ ? Finish::kRing : Finish::kLeaderCommits; }
  bool takes_the_mean() const override { return true; }
  StatusOr<std::unique_ptr<aggregator::Accumulator>> Start(uint64_t step, std::span<const float> replica) override;
  Status Apply(const std::optional<std::vector<float>>& result, std::vector<float>& replica) override;
  std::vector<float> SaveState() const override;
  Status LoadState(std::span<const float> state) override;

 protected:
  // Sets up the mean + `optimizer` commit for a model of n parameters.
  Status InitMeanThenOptimizer(const OptimizerConfig& optimizer, size_t n);
  // Sets up the sign-of-the-sum commit with step lr.
  Status InitSignOfSum(float lr);
  // The step's updates go through a ring all-reduce instead of the commit log.
  void UseRing() { ring_ = true; }

 private:
  std::unique_ptr<aggregator::Strategy> strategy_;
  std::unique_ptr<Backend> host_;             // the replicated step, always on the CPU (same bits everywhere)
  std::unique_ptr<nn::Optimizer> optimizer_;  // null: the accumulator's result is added
  bool ring_ = false;
};

}  // namespace shoal::peer
