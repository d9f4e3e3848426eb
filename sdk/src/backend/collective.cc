// The thread group (backend/collective.h). A call is three phases around a barrier:
//   1. each rank publishes its buffer (and checks every rank's size after the barrier);
//   2. rank r sums its slice [r n / N, (r + 1) n / N) over every rank's buffer, in rank order,
//      into a shared result (the slices are disjoint, so the ranks work in parallel);
//   3. each rank copies the result into its own buffer; a last barrier keeps every buffer
//      alive until all are done with them.
// The barrier is a generation counter under a mutex, so that Abort can wake every waiter.
#include "backend/collective.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>

namespace shoal {
namespace {

struct Group {
  explicit Group(int n) : ranks(n), buffers(static_cast<size_t>(n)) {}

  // Waits until every rank has arrived; the group's abort status when aborted.
  Status Arrive() {
    std::unique_lock<std::mutex> lock(mu);
    if (!aborted.ok()) return aborted;
    const uint64_t gen = generation;
    if (++arrived == ranks) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return Status::Ok();
    }
    cv.wait(lock, [&] { return generation != gen || !aborted.ok(); });
    return generation != gen ? Status::Ok() : aborted;
  }

  void Abort(const Status& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted.ok()) aborted = why.ok() ? Status::Cancelled("the group was aborted") : why;
    cv.notify_all();
  }

  const int ranks;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  Status aborted;
  std::vector<std::span<float>> buffers;  // each rank's, for the call under way
  std::vector<float> result;
};

class ThreadRank final : public Collective {
 public:
  ThreadRank(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->ranks; }

  Status AllReduceSum(std::span<float> data) override {
    return Run(data, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) {
        float s = g_->buffers[0][i];
        for (int r = 1; r < g_->ranks; ++r) s += g_->buffers[static_cast<size_t>(r)][i];
        g_->result[i] = s;
      }
    });
  }

  Status Broadcast(std::span<float> data, int root) override {
    if (root < 0 || root >= g_->ranks) {
      const Status st = Status::InvalidArgument("broadcast root " + std::to_string(root) + " is not a rank of " +
                                                std::to_string(g_->ranks));
      g_->Abort(st);
      return st;
    }
    return Run(data, [&](size_t lo, size_t hi) {
      const std::span<float> from = g_->buffers[static_cast<size_t>(root)];
      std::copy(from.begin() + static_cast<std::ptrdiff_t>(lo), from.begin() + static_cast<std::ptrdiff_t>(hi),
                g_->result.begin() + static_cast<std::ptrdiff_t>(lo));
    });
  }

  void Abort(const Status& why) override { g_->Abort(why); }

 private:
  // The three phases, with `slice(lo, hi)` writing result[lo, hi) from the buffers.
  template <typename F>
  Status Run(std::span<float> data, F&& slice) {
    g_->buffers[static_cast<size_t>(rank_)] = data;
    SHOAL_RETURN_IF_ERROR(g_->Arrive());
    const size_t n = g_->buffers[0].size();
    for (int r = 1; r < g_->ranks; ++r)
      if (g_->buffers[static_cast<size_t>(r)].size() != n) {
        const Status st = Status::InvalidArgument("rank " + std::to_string(r) + " passed " +
                                                  std::to_string(g_->buffers[static_cast<size_t>(r)].size()) +
                                                  " values, rank 0 " + std::to_string(n));
        g_->Abort(st);
        return st;
      }
    if (rank_ == 0) g_->result.resize(n);
    SHOAL_RETURN_IF_ERROR(g_->Arrive());  // the result has its size
    const auto ranks = static_cast<uint64_t>(g_->ranks), r = static_cast<uint64_t>(rank_);
    slice(static_cast<size_t>(n * r / ranks), static_cast<size_t>(n * (r + 1) / ranks));
    SHOAL_RETURN_IF_ERROR(g_->Arrive());  // every slice is in
    std::copy(g_->result.begin(), g_->result.end(), data.begin());
    return g_->Arrive();  // every rank has its copy: the buffers may go
  }

  std::shared_ptr<Group> g_;
  const int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> MakeThreadGroup(int ranks) {
  std::vector<std::unique_ptr<Collective>> out;
  if (ranks < 1) return out;
  auto g = std::make_shared<Group>(ranks);
  for (int r = 0; r < ranks; ++r) out.push_back(std::make_unique<ThreadRank>(g, r));
  return out;
}

}  // namespace shoal
