// Test helper: one round through a strategy's accumulator, updates added in the given order.
#pragma once

#include <string>
#include <vector>

#include "aggregate/strategy.h"

namespace shoal::aggregator {

struct TestUpdate {
  std::string client;
  uint64_t num_examples = 0;
  std::vector<float> delta;
};

inline StatusOr<std::optional<std::vector<float>>> RunRound(Strategy& s, uint64_t round,
                                                            const std::vector<TestUpdate>& updates,
                                                            std::span<const float> global,
                                                            std::span<const ClientFailure> failures = {}) {
  auto acc = s.StartRound(round, global);
  for (const auto& u : updates) SHOAL_RETURN_IF_ERROR(acc->Add({u.client, 0, u.num_examples, u.delta}));
  return acc->Finish(failures);
}

}  // namespace shoal::aggregator
