#include "aggregate/strategies/fedavg.h"

#include <memory>

namespace shoal::aggregator {

std::optional<std::vector<float>> WeightedAverage(std::span<const ClientResult> results, float scale) {
  if (results.empty()) return std::nullopt;
  uint64_t total = 0;
  for (const auto& r : results) total += r.num_examples;
  if (total == 0) return std::nullopt;
  const size_t n = results.front().delta.size();
  // Accumulate in double: with results in canonical order this is exactly reproducible,
  // and the rounding error does not grow with the number of clients.
  std::vector<double> acc(n, 0.0);
  for (const auto& r : results) {
    const double w = static_cast<double>(r.num_examples) / static_cast<double>(total);
    const float* d = r.delta.data();
    for (size_t i = 0; i < n; ++i) acc[i] += w * d[i];
  }
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(acc[i] * scale);
  return out;
}

std::unique_ptr<Strategy> MakeFedAvg(const StrategyOptions& o) { return std::make_unique<FedAvg>(o); }

}  // namespace shoal::aggregator
