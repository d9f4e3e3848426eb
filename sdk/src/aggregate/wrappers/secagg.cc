#include "aggregate/wrappers/secagg.h"

namespace shoal::aggregator {

Status CheckSecAggStrategy(const Strategy& strategy) {
  if (strategy.needs_individual_updates())
    return Status::InvalidArgument("--strategy " + strategy.name() +
                                   " needs every client's update, which secure aggregation never reveals; choose "
                                   "a strategy of the mean (fedavg, fedprox, demo, fedavgm, fedadam, fedyogi, fedadagrad) with --secagg");
  return Status::Ok();
}

}  // namespace shoal::aggregator
