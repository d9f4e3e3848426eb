#include "aggregate/strategies/fedbuff.h"

#include <algorithm>
#include <cmath>

#include "aggregate/exact_sum.h"
#include "aggregate/strategies/fedavg.h"

namespace shoal::aggregator {

uint64_t FedBuffWeight(uint64_t staleness) {
  if (staleness >= (uint64_t{1} << 32)) return 0;
  const UInt128 limit = UInt128{1} << 32, d = UInt128{staleness} + 1;
  // A guess from the double square root, then corrected in exact integers.
  uint64_t w = static_cast<uint64_t>(65536.0 / std::sqrt(static_cast<double>(d)));
  while (UInt128{w} * w * d > limit) --w;
  while (UInt128{w + 1} * (w + 1) * d <= limit) ++w;
  return w;
}

namespace {

// What the last commit's buffer held, for the metrics line.
struct BufferStats {
  double staleness_mean = 0.0;
  uint64_t staleness_max = 0;
};

class Buffer final : public Accumulator {
 public:
  Buffer(size_t n, double eta, BufferStats* stats) : sum_(n), eta_(eta), stats_(stats) { *stats_ = {}; }
  Status Add(const ClientUpdate& u) override {
    const uint64_t w = FedBuffWeight(u.staleness);
    if (w == 0) return Status::InvalidArgument("staleness " + std::to_string(u.staleness) + " is beyond any weight");
    SHOAL_RETURN_IF_ERROR(sum_.Add(u.delta, w));
    staleness_sum_ += static_cast<double>(u.staleness);
    staleness_max_ = std::max(staleness_max_, u.staleness);
    return Status::Ok();
  }
  uint64_t count() const override { return sum_.count(); }
  StatusOr<std::optional<std::vector<float>>> Finish(std::span<const ClientFailure>) override {
    const uint64_t k = sum_.count();
    *stats_ = BufferStats{k ? staleness_sum_ / static_cast<double>(k) : 0.0, staleness_max_};
    if (k == 0) return std::optional<std::vector<float>>();
    const double divisor = static_cast<double>(k) * static_cast<double>(kFedBuffUnit);
    std::vector<float> step(sum_.size());
    for (size_t i = 0; i < step.size(); ++i) step[i] = static_cast<float>(sum_.Value(i) / divisor * eta_);
    return std::optional<std::vector<float>>(std::move(step));
  }

 private:
  ExactSum sum_;
  double eta_;
  BufferStats* stats_;
  double staleness_sum_ = 0.0;
  uint64_t staleness_max_ = 0;
};

// FedAvg's round configuration; its own buffer and the asynchronous policy.
class FedBuff final : public FedAvg {
 public:
  using FedAvg::FedAvg;
  std::string name() const override { return "fedbuff"; }
  std::unique_ptr<Accumulator> StartRound(uint64_t, std::span<const float> global) override {
    return std::make_unique<Buffer>(global.size(), options().server_learning_rate, &stats_);
  }
  std::optional<AsyncPolicy> asynchronous() const override {
    return AsyncPolicy{options().buffer_size, options().max_staleness};
  }
  std::vector<StrategyMetric> RoundMetrics() const override {
    return {{"staleness_mean", stats_.staleness_mean}, {"staleness_max", static_cast<double>(stats_.staleness_max)}};
  }

 private:
  BufferStats stats_;
};

}  // namespace

std::unique_ptr<Strategy> MakeFedBuff(const StrategyOptions& o) { return std::make_unique<FedBuff>(o); }

}  // namespace shoal::aggregator
