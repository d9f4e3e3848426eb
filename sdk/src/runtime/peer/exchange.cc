#include "runtime/peer/exchange.h"

#include <utility>

namespace shoal::peer {

// One factory per file under exchanges/.
StatusOr<std::unique_ptr<Exchange>> MakeAllgather(const protocol::SwarmInfo& swarm, const std::vector<TensorSpec>& layout);
StatusOr<std::unique_ptr<Exchange>> MakeAllreduce(const protocol::SwarmInfo& swarm, const std::vector<TensorSpec>& layout);
StatusOr<std::unique_ptr<Exchange>> MakeDiloco(const protocol::SwarmInfo& swarm, const std::vector<TensorSpec>& layout);
StatusOr<std::unique_ptr<Exchange>> MakeGossip(const protocol::SwarmInfo& swarm, const std::vector<TensorSpec>& layout);

std::vector<std::string> Exchange::Recipients(const std::string& who, uint64_t,
                                              const std::vector<std::string>& live) const {
  std::vector<std::string> others;
  for (const auto& n : live)
    if (n != who) others.push_back(n);
  return others;
}

StatusOr<std::unique_ptr<Exchange>> MakeExchange(const protocol::SwarmInfo& swarm, const std::vector<TensorSpec>& layout) {
  if (swarm.mode == "allgather") return MakeAllgather(swarm, layout);
  if (swarm.mode == "allreduce") return MakeAllreduce(swarm, layout);
  if (swarm.mode == "diloco") return MakeDiloco(swarm, layout);
  if (swarm.mode == "gossip") return MakeGossip(swarm, layout);
  return Status::InvalidArgument("unknown --mode '" + swarm.mode + "': expected allgather, allreduce, diloco or gossip");
}

}  // namespace shoal::peer
