// Data parallelism inside one site (issue 19: a Shoal identity that owns several GPUs, or a
// CPU job's ranks as threads). The built-in trainer's ranks each hold a backend, a replica of
// the model, an optimizer and a gradient buffer; every step, the minibatch is split among
// them (rows, or token windows), each computes its shard's gradient, the gradients are
// all-reduced weighted by the shards' shares (backend/collective.h: the thread group on CPUs,
// NCCL on GPUs), and every rank applies the same step to its replica, so the replicas stay
// identical (the trainer checks at the end of each round). The site still sends one update
// per round, encoded once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shoal/status.h"

namespace shoal::nn {

// The devices of `ranks` ranks for a --device value: "cpu" x ranks; "cuda" -> cuda:0..;
// "cuda:K" -> cuda:K..; "auto" -> CUDA when a device is usable, else the CPU. One rank:
// {device} as given.
StatusOr<std::vector<std::string>> RankDevices(const std::string& device, int ranks);

// The ranks' threads: rank 0 runs on the caller's thread, ranks 1.. on threads of their own
// that live as long as the pool (a CUDA rank's work always comes from the same thread).
class RankPool {
 public:
  explicit RankPool(int ranks);
  ~RankPool();
  RankPool(const RankPool&) = delete;
  RankPool& operator=(const RankPool&) = delete;

  int size() const { return ranks_; }
  // Runs fn(r) for every rank r at once and waits for all; the lowest rank's error, if any.
  // With one rank, fn(0) on the caller's thread and nothing else.
  Status Run(const std::function<Status(int)>& fn);

 private:
  void Worker(int rank);

  int ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<Status(int)>* job_ = nullptr;  // guarded by mu_
  uint64_t generation_ = 0;                          // a new job
  int pending_ = 0;                                  // workers still on the job
  bool quit_ = false;
  std::vector<Status> results_;
  std::vector<std::thread> threads_;
};

}  // namespace shoal::nn
