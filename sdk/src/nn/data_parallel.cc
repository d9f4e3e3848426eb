#include "nn/data_parallel.h"

#include <spdlog/spdlog.h>

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

}  // namespace shoal::nn
