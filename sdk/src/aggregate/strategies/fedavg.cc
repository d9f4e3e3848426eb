#include "aggregate/strategies/fedavg.h"

#include <memory>

namespace shoal::aggregator {

std::unique_ptr<Strategy> MakeFedAvg(const StrategyOptions& o) { return std::make_unique<FedAvg>(o); }

}  // namespace shoal::aggregator
