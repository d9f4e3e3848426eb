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

using shoal::SecAggOptions;  // public: shoal/server.h

// InvalidArgument naming the strategy when it needs individual updates.
Status CheckSecAggStrategy(const Strategy& strategy);

}  // namespace shoal::aggregator
