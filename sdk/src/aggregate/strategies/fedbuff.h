// FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation",
// AISTATS 2022): clients train without waiting for a cohort, each on the model version it
// holds; the service buffers K updates (--buffer-size) and then commits
//   x += eta * (1/K) * sum_k s(tau_k) * delta_k,      s(tau) = 1 / sqrt(1 + tau),
// tau_k the update's staleness: the commits made since the version it was trained from
// (0 = the current model), eta = --server-lr (1). As in the paper, each update counts once,
// whatever its example count (its clients run a fixed amount of local work), and the sum is
// divided by K, not by the weights: a buffer of stale updates moves the model less.
//
// Exactness: s is applied as the integer weight w(tau) = floor(2^16 / sqrt(1 + tau)), the
// largest w with w^2 (1 + tau) <= 2^32 (computed in integers: 65536 for a fresh update, 46340
// for tau = 1, 32768 for tau = 3, >= 1 for every tau below 2^32), and the weighted sum is
// exact (ExactSum), so a commit is bit-identical whatever order its buffer filled in. Each
// coordinate is float(V / (K * 2^16) * eta), V the exact sum rounded once to double.
//
// What it refuses: the service refuses an update more than --max-staleness commits old (late,
// counted in updates_late), and the combinations a buffer of stale updates breaks: secure
// aggregation and DP, which need a synchronous cohort. Stateless between commits: the
// service's checkpoint (model, download codec) is all a resume needs.
#pragma once

#include <cstdint>
#include <memory>

#include "aggregate/strategy.h"

namespace shoal::aggregator {

inline constexpr uint64_t kFedBuffUnit = uint64_t{1} << 16;  // w(0)

// w(tau) above; 0 for tau >= 2^32 (never accepted: --max-staleness is a uint32).
uint64_t FedBuffWeight(uint64_t staleness);

std::unique_ptr<Strategy> MakeFedBuff(const StrategyOptions& o);

}  // namespace shoal::aggregator
