// WeightedMean: the accumulator of the FedAvg family. Finish gives
//   delta = scale * sum_k n_k * delta_k / sum_k n_k
// (n_k the clients' example counts) from an exact sum, rounded once per coordinate, so the
// aggregate is bit-identical whatever order the updates arrived in. Strategies that post-process
// the mean (DeMo's sign step) derive from it and read the exact sum.
#pragma once

#include <cstddef>

#include "aggregate/exact_sum.h"
#include "aggregate/strategy.h"

namespace shoal::aggregator {

class WeightedMean : public Accumulator {
 public:
  WeightedMean(size_t n, double scale) : sum_(n), scale_(scale) {}
  Status Add(const ClientUpdate& u) override { return sum_.Add(u.delta, u.num_examples); }
  Status AddPartialSum(const ExactSum& sum) override { return sum_.Merge(sum); }
  uint64_t count() const override { return sum_.count(); }
  StatusOr<std::optional<std::vector<float>>> Finish(std::span<const ClientFailure>) override {
    if (sum_.count() == 0) return std::optional<std::vector<float>>();
    std::vector<float> mean(sum_.size());
    sum_.Mean(scale_, mean);
    return std::optional<std::vector<float>>(std::move(mean));
  }

 protected:
  const ExactSum& sum() const { return sum_; }

 private:
  ExactSum sum_;
  double scale_;
};

}  // namespace shoal::aggregator
