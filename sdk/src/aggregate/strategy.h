// Strategy (Flower style): how the aggregator configures a round and combines the results.
// One strategy per file under aggregate/strategies/. Cross-cutting features (DP, secure
// aggregation) wrap a strategy instead of living inside each one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shoal/status.h"
#include "shoal/server.h"
#include "shoal/trainer.h"

namespace shoal::aggregator {

class ExactSum;

// One client's update as an accumulator sees it: decoded and validated by the caller, read
// during Add and not kept.
struct ClientUpdate {
  std::string_view client;       // canonical client key (its name)
  uint32_t client_id = 0;
  uint64_t num_examples = 0;     // FedAvg weight, in [1, 2^40]
  std::span<const float> delta;  // w_local - w_global
  // Asynchronous strategies: commits made since the model version the client trained from
  // (0 = the current one). Always 0 in synchronous rounds.
  uint64_t staleness = 0;
};

// A selected client that did not report, and why.
struct ClientFailure {
  std::string client;
  uint32_t client_id = 0;
  std::string reason;            // "deadline", "disconnected", "rejected: ..."
};

// StrategyOptions and StrategyMetric are public (shoal/server.h).
using shoal::StrategyMetric;
using shoal::StrategyOptions;

// How an asynchronous strategy wants the service to run (Strategy::asynchronous): no rounds
// that wait for a cohort; every busy client trains on the model version it holds, and a
// "round" is one commit of `buffer` updates. An update whose base is more than
// `max_staleness` commits old is refused as late.
struct AsyncPolicy {
  uint32_t buffer = 0;
  uint32_t max_staleness = 0;
};

// One round's aggregation, fed one update at a time as each arrives and is validated, so the
// server holds O(model) memory whatever the number of clients. The sums are exact
// (ExactSum), so the result does not depend on the order of the Adds.
class Accumulator {
 public:
  virtual ~Accumulator() = default;
  // Refuses (InvalidArgument, nothing added) an update of the wrong size, with a NaN/Inf, or
  // with a weight outside [1, 2^40].
  virtual Status Add(const ClientUpdate& update) = 0;
  // An edge aggregator's exact partial sum of its clients' updates (hierarchical aggregation:
  // runtime/server/edge.cc), weighted by their example counts, added as if each of its updates
  // had been added here. Only a weighted mean can take one; the default refuses
  // (FailedPrecondition) with why, nothing added.
  virtual Status AddPartialSum(const ExactSum& sum) {
    (void)sum;
    return Status::FailedPrecondition("this strategy needs each client's update; an edge aggregator's partial sum "
                                      "needs a weighted mean (fedavg, fedprox, fedavgm, fedadam, fedyogi, fedadagrad, demo)");
  }
  virtual uint64_t count() const = 0;  // updates added (a partial sum counts its updates)
  // The delta to apply to the global model, or nullopt to keep it (nothing was added).
  virtual StatusOr<std::optional<std::vector<float>>> Finish(std::span<const ClientFailure> failures) = 0;
};

// One value a strategy reports about the round it just finished (DP: "epsilon"), written
// into the round's metrics line under its name.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // The per-round settings sent to the selected clients.
  virtual RoundConfig Configure(uint64_t round) const = 0;
  // A fresh accumulator for `round`, whose updates are deltas against `global`.
  virtual std::unique_ptr<Accumulator> StartRound(uint64_t round, std::span<const float> global) = 0;
  // Whether it must see each client's update (median, Krum, ...): the wrappers that hide them
  // (secure aggregation, differential privacy) refuse such a strategy at start-up.
  virtual bool needs_individual_updates() const { return false; }
  // Whether clients must be selected by Poisson sampling (each independently with probability
  // --fraction, from the OS CSPRNG), which the DP accountant assumes; otherwise a seeded
  // shuffle picks exactly ceil(fraction * n).
  virtual bool poisson_sampling() const { return false; }
  // Set for an asynchronous strategy (FedBuff); nullopt for synchronous rounds.
  virtual std::optional<AsyncPolicy> asynchronous() const { return std::nullopt; }
  // Values about the round whose accumulator finished last, for the metrics line.
  virtual std::vector<StrategyMetric> RoundMetrics() const { return {}; }
  // Why round `round` must not start (a privacy budget that it would exceed), or nullopt.
  virtual std::optional<std::string> StopBefore(uint64_t round) const {
    (void)round;
    return std::nullopt;
  }
  // Opaque state saved with each checkpoint and restored on --resume (empty when stateless).
  virtual std::string SaveState() const { return {}; }
  virtual Status LoadState(const std::string& state) {
    return state.empty() ? Status::Ok() : Status::Corruption(name() + " strategy has no state to restore");
  }
};

// One of the names above; InvalidArgument otherwise (lists the valid names), or for a
// setting out of range.
StatusOr<std::unique_ptr<Strategy>> MakeStrategy(const StrategyOptions& options);

}  // namespace shoal::aggregator
