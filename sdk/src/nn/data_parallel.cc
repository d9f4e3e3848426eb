#include "nn/data_parallel.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "backend/backend.h"

namespace shoal::nn {

StatusOr<std::vector<std::string>> RankDevices(const std::string& device, int ranks) {
  if (ranks < 1 || ranks > 1024) return Status::InvalidArgument("ranks must be in [1, 1024], got " + std::to_string(ranks));
  if (ranks == 1) return std::vector<std::string>{device};
  std::vector<std::string> out;
  std::string kind = device;
  int first = 0;
  if (device == "auto") {
    auto cuda = MakeBackend("cuda");
    kind = cuda.ok() ? "cuda" : "cpu";
    if (!cuda.ok()) spdlog::info("device auto: {} ranks on the cpu ({})", ranks, cuda.status().message());
  } else if (device.rfind("cuda", 0) == 0) {
    SHOAL_ASSIGN_OR_RETURN(first, CudaDeviceIndex(device));
    kind = "cuda";
  }
  if (kind != "cpu" && kind != "cuda")
    return Status::InvalidArgument("unknown --device '" + device + "': expected auto, cpu, cuda or cuda:N");
  for (int r = 0; r < ranks; ++r) out.push_back(kind == "cpu" ? "cpu" : "cuda:" + std::to_string(first + r));
  return out;
}

RankPool::RankPool(int ranks) : ranks_(ranks), results_(static_cast<size_t>(ranks)) {
  for (int r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { Worker(r); });
}

RankPool::~RankPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void RankPool::Worker(int rank) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return quit_ || generation_ != seen; });
    if (quit_) return;
    seen = generation_;
    const std::function<Status(int)>* job = job_;
    lock.unlock();
    Status st = (*job)(rank);
    lock.lock();
    results_[static_cast<size_t>(rank)] = std::move(st);
    if (--pending_ == 0) cv_.notify_all();
  }
}

Status RankPool::Run(const std::function<Status(int)>& fn) {
  if (ranks_ == 1) return fn(0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_ = ranks_ - 1;
    ++generation_;
  }
  cv_.notify_all();
  results_[0] = fn(0);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  for (const Status& st : results_)
    if (!st.ok()) return st;
  return Status::Ok();
}


GradientBuckets::GradientBuckets(Collective* collective, Backend* backend, size_t n, size_t bucket)
    : collective_(collective), backend_(backend), n_(n), bucket_(std::max<size_t>(bucket, 1)),
      count_((n + bucket_ - 1) / bucket_), thread_([this] { Loop(); }) {}

GradientBuckets::~GradientBuckets() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradientBuckets::Begin(float* grads, float share) {
  std::lock_guard<std::mutex> lock(mu_);
  grads_ = grads;
  share_ = share;
  frontier_ = n_;
  ahead_.clear();
  next_ = done_ = 0;
  error_ = Status::Ok();
  active_ = true;
}

// On the compute thread (the backend is only ever used from there): the range is scaled by the
// rank's share now, then handed to the bucket thread.
void GradientBuckets::Ready(size_t offset, size_t count) {
  if (count == 0 || offset + count > n_) return;
  backend_->Scale(count, share_, grads_ + offset);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ahead_[offset + count] = offset;
    for (auto it = ahead_.find(frontier_); it != ahead_.end(); it = ahead_.find(frontier_)) {
      frontier_ = it->second;
      ahead_.erase(it);
    }
  }
  cv_.notify_all();
}

Status GradientBuckets::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  // What the model did not announce: [0, frontier_) less the ranges announced out of order.
  std::vector<std::pair<size_t, size_t>> rest;  // [begin, end)
  size_t top = frontier_;
  for (auto it = ahead_.rbegin(); it != ahead_.rend(); ++it) {  // by descending end
    if (it->first < top) rest.emplace_back(it->first, top);
    top = std::min(top, it->second);
  }
  if (top > 0) rest.emplace_back(0, top);
  lock.unlock();
  for (auto [begin, end] : rest) backend_->Scale(end - begin, share_, grads_ + begin);
  lock.lock();
  ahead_.clear();
  frontier_ = 0;
  cv_.notify_all();
  cv_.wait(lock, [this] { return done_ == count_; });
  active_ = false;
  return error_;
}

// Bucket k of the fixed order covers [n - (k + 1) b, n - k b), clipped at 0: the arena's end
// first.
void GradientBuckets::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] {
      if (quit_) return true;
      if (!active_ || next_ == count_) return false;
      const size_t end = n_ - next_ * bucket_;
      return frontier_ <= (end > bucket_ ? end - bucket_ : 0);
    });
    if (quit_) return;
    const size_t end = n_ - next_ * bucket_, start = end > bucket_ ? end - bucket_ : 0;
    ++next_;
    const bool failed = !error_.ok();
    float* grads = grads_;
    lock.unlock();
    const Status st = failed ? Status::Ok() : collective_->AllReduceSum(std::span<float>(grads + start, end - start));
    lock.lock();
    if (!st.ok() && error_.ok()) error_ = st;
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace shoal::nn
