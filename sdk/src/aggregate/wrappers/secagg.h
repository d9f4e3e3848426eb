// Secure aggregation's place among the strategies. The aggregator never sees an individual
// update under SecAgg+: the round protocol (privacy/secagg, run by runtime/server/secagg.cc)
// yields only the sum of the survivors' fixed-point updates, which enters the strategy's
// accumulator as the round's one update (their unweighted mean, weight = survivors). So any
// strategy that only post-processes the mean (FedAvg, FedProx, DeMo, DP in distributed mode)
// composes with it, and one that needs individual updates (median, Krum, ...) is refused here,
// at start-up.
#pragma once

#include <cstdint>

#include "aggregate/strategy.h"

namespace shoal::aggregator {

struct SecAggOptions {
  bool enabled = false;               // --secagg
  double range = 1.0;                 // --secagg-range: each masked value is clipped to [-R, R] (counted)
  uint32_t threshold = 0;             // --secagg-threshold: shares to reconstruct a secret (0 = derive)
  uint32_t neighbours = 0;            // --secagg-neighbours: graph degree (0 = derive; >= n-1 = full graph)
  double dropout = 0.2;               // --secagg-dropout: share of clients that may drop within a round
  double corrupt = 0.0;               // --secagg-corrupt: share of clients that may collude with the server
  uint32_t stage_timeout_ms = 10000;  // --secagg-stage-timeout: each key stage and the unmask stage wait this long
};

// InvalidArgument naming the strategy when it needs individual updates.
Status CheckSecAggStrategy(const Strategy& strategy);

}  // namespace shoal::aggregator
