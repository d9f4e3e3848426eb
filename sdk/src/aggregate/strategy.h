// Strategy (Flower style): how the aggregator configures a round and combines the results.
// One strategy per file under aggregate/strategies/. Cross-cutting features (DP, secure
// aggregation) wrap a strategy instead of living inside each one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shoal/status.h"
#include "shoal/trainer.h"

namespace shoal::aggregator {

// One client's contribution to a round.
struct ClientResult {
  std::string client;            // canonical client key (its name); results are sorted by it
  uint32_t client_id = 0;
  uint64_t num_examples = 0;     // FedAvg weight
  std::vector<float> delta;      // w_local - w_global, decoded
  std::vector<std::pair<std::string, double>> metrics;
};

// A selected client that did not report, and why.
struct ClientFailure {
  std::string client;
  uint32_t client_id = 0;
  std::string reason;            // "deadline", "disconnected", "rejected: ..."
};

// Strategy settings from the command line / config file.
struct StrategyOptions {
  std::string name = "fedavg";   // "fedavg" | "fedprox" | "demo"
  float learning_rate = 0.05f;   // client learning rate sent in each round's config
  uint32_t local_epochs = 1;
  uint32_t local_steps = 0;
  float prox_mu = 0.01f;         // fedprox only
  float server_learning_rate = 1.0f;  // scales the averaged delta (1 = plain FedAvg)
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // The per-round settings sent to the selected clients.
  virtual RoundConfig Configure(uint64_t round) const = 0;
  // Combines the round's results into the delta to apply to the global model, or nullopt to
  // keep the model. `results` arrive sorted by client key, so the sum has a canonical order
  // and the aggregate does not depend on arrival order.
  virtual StatusOr<std::optional<std::vector<float>>> Aggregate(uint64_t round, std::span<const ClientResult> results,
                                                                std::span<const ClientFailure> failures,
                                                                std::span<const float> global) = 0;
  // Opaque state saved with each checkpoint and restored on --resume (empty when stateless).
  virtual std::string SaveState() const { return {}; }
  virtual Status LoadState(const std::string& state) {
    return state.empty() ? Status::Ok() : Status::Corruption(name() + " strategy has no state to restore");
  }
};

// "fedavg" | "fedprox"; InvalidArgument otherwise (lists the valid names).
StatusOr<std::unique_ptr<Strategy>> MakeStrategy(const StrategyOptions& options);

// Example-weighted mean of the deltas, summed in double in the given order; the building
// block of FedAvg-family strategies. Empty `results` give nullopt.
std::optional<std::vector<float>> WeightedAverage(std::span<const ClientResult> results, float scale);

}  // namespace shoal::aggregator
