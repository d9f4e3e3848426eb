// DeMo (Peng et al. 2024, "Decoupled Momentum Optimization"), server side. Clients training
// with the "demo" optimizer (sdk/src/nn/demo_optimizer.h) do not send w_local - w_global: each
// sends -Q, minus the sum of the DCT top-k components it extracted from its local momentum
// this round (for one local step, -q). DeMo's update, w = w - lr * sign(mean q), becomes
//   update = lr * server_lr * sign(sum_k n_k * delta_k)   (the exact sign of the example-weighted
// sum, so a tiny mean does not underflow to 0) with lr the round's learning rate (--lr) and
// sign(0) = 0, so that
//   global = global + update = global - lr * server_lr * sign(mean Q).
// Round configuration as FedAvg. Running this strategy with clients that send ordinary deltas
// (or FedAvg with DeMo clients) is a configuration error the strategy cannot detect.
#include <memory>

#include "aggregate/strategies/fedavg.h"

namespace shoal::aggregator {
namespace {

// The sign of the exact weighted sum, times the step.
class SignOfMean final : public WeightedMean {
 public:
  SignOfMean(size_t n, float step) : WeightedMean(n, 1.0), step_(step) {}
  StatusOr<std::optional<std::vector<float>>> Finish(std::span<const ClientFailure>) override {
    if (count() == 0) return std::optional<std::vector<float>>();
    std::vector<float> update(sum().size());
    for (size_t i = 0; i < update.size(); ++i) update[i] = step_ * static_cast<float>(sum().Sign(i));
    return std::optional<std::vector<float>>(std::move(update));
  }

 private:
  float step_;
};

class Demo final : public FedAvg {
 public:
  using FedAvg::FedAvg;
  std::string name() const override { return "demo"; }
  std::unique_ptr<Accumulator> StartRound(uint64_t, std::span<const float> global) override {
    return std::make_unique<SignOfMean>(global.size(), options().learning_rate * options().server_learning_rate);
  }
};

}  // namespace

std::unique_ptr<Strategy> MakeDemo(const StrategyOptions& o) { return std::make_unique<Demo>(o); }

}  // namespace shoal::aggregator
