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
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/collective.h"
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


// DDP's gradient buckets (Li et al. 2020, "PyTorch Distributed"): the gradient arena cut into
// buckets of `bucket` floats, all-reduced from the last to the first, the order in which the
// backward pass finishes them, on a thread of the rank's own while the backward pass goes on.
// The model announces each range of the arena that is final (Model::set_gradient_ready); a
// bucket goes once everything from its start to the end of the arena is final. Every rank
// reduces the same buckets in the same order whatever its model announced (a rank with an
// empty shard announces nothing and reduces them all at Finish), so the collective's calls
// pair up; each element is scaled and summed as one all-reduce of the whole arena would, so
// the result has the same bits.
class GradientBuckets {
 public:
  GradientBuckets(Collective* collective, Backend* backend, size_t n, size_t bucket);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // A step begins: `grads` (n floats on the rank's backend) becomes final range by range; each
  // bucket is scaled by `share` (the rank's share of the minibatch) and then summed.
  void Begin(float* grads, float share);
  // [offset, offset + count) is final (the model's backward pass, on the compute thread).
  void Ready(size_t offset, size_t count);
  // The whole arena is final: the buckets left go, and this waits for all; the first error.
  Status Finish();
  size_t buckets() const { return count_; }

 private:
  void Loop();

  Collective* collective_;
  Backend* backend_;
  size_t n_, bucket_, count_;
  std::mutex mu_;
  std::condition_variable cv_;
  float* grads_ = nullptr;
  float share_ = 1.0f;
  bool active_ = false, quit_ = false;
  size_t frontier_ = 0;                 // [frontier_, n) is final
  std::map<size_t, size_t> ahead_;      // final ranges above no frontier yet: end -> offset
  size_t next_ = 0, done_ = 0;          // buckets started, finished (in the fixed order)
  Status error_;
  std::thread thread_;
};

}  // namespace shoal::nn
