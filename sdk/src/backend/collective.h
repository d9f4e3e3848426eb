// Collective: the operations the ranks of one data-parallel job run together on their
// gradients (issue 19: a site that is itself a multi-GPU job). One object per rank; every rank
// calls the same operations, with the same sizes, in the same order, and each call returns once
// every rank has made it.
//
// Implementations: ranks as threads of one process on the host (here: the CPU path, which
// every CPU test covers) and, on GPUs, NCCL (kernels/nccl_group.cc, in the CUDA module).
// Results are the same bits on every rank: the thread group sums element i as
// ((x_0[i] + x_1[i]) + x_2[i]) + ... in rank order, in fp32, whichever rank computes it; NCCL
// reduces each element once, in its own order, and sends every rank that result.
//
// Failure. A rank that cannot go on calls Abort(why); every rank's pending and later calls then
// return that status, so no rank waits forever for one that died. Sizes that differ
// between the ranks of one call fail that call on every rank (InvalidArgument) and abort the
// group: the ranks no longer agree on what they run.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shoal/status.h"

namespace shoal {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data = the element-wise sum of every rank's data (the same length on every rank).
  virtual Status AllReduceSum(std::span<float> data) = 0;
  // data = root's data on every rank.
  virtual Status Broadcast(std::span<float> data, int root) = 0;
  // Ends the group: every rank's pending and later calls return `why`.
  virtual void Abort(const Status& why) = 0;
};

// `ranks` (>= 1) ranks as threads of this process: the i-th object is rank i, to be used from
// one thread each. The reduction is split among the ranks (each sums a slice, in rank order).
std::vector<std::unique_ptr<Collective>> MakeThreadGroup(int ranks);

// The group of ranks on `devices` (one entry per rank, as backend/registry.cc names devices):
// every one "cpu" -> the thread group; distinct "cuda:N" -> NCCL, from the CUDA module
// (backend/registry.cc). InvalidArgument for a mix or a repeated GPU; the module's error when
// it cannot be loaded or was built without NCCL.
StatusOr<std::vector<std::unique_ptr<Collective>>> MakeCollectiveGroup(const std::vector<std::string>& devices);

}  // namespace shoal
