#include <cuda_runtime.h>

#include "allocator.cuh"
#include "check.cuh"

namespace shoal::cuda {

size_t CachingAllocator::RoundUp(size_t bytes) {
  if (bytes == 0) bytes = 1;
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20;
  if (bytes < (size_t{1} << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void* CachingAllocator::Alloc(size_t bytes) {
  const size_t size = RoundUp(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  // Best fit among cached blocks, but never more than twice the request (waste bound).
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= 2 * size) {
    void* p = it->second;
    stats_.cached_bytes -= it->first;
    stats_.in_use_bytes += it->first;
    free_.erase(it);
    ++stats_.reused;
    return p;
  }
  void* p = nullptr;
  if (cudaMalloc(&p, size) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error state of the failed call
    // Out of memory: give the cache back and try once more.
    for (auto& [s, block] : free_) {
      cudaFree(block);
      sizes_.erase(block);
    }
    free_.clear();
    stats_.cached_bytes = 0;
    if (cudaMalloc(&p, size) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
  }
  sizes_[p] = size;
  stats_.in_use_bytes += size;
  ++stats_.device_allocs;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.in_use_bytes + stats_.cached_bytes);
  return p;
}

void CachingAllocator::Free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sizes_.find(p);
  if (it == sizes_.end()) Fatal("CachingAllocator::Free", "pointer not from this allocator", __FILE__, __LINE__);
  stats_.in_use_bytes -= it->second;
  stats_.cached_bytes += it->second;
  free_.emplace(it->second, p);
}

void CachingAllocator::ReleaseCache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [s, block] : free_) {
    cudaFree(block);
    sizes_.erase(block);
  }
  free_.clear();
  stats_.cached_bytes = 0;
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

CachingAllocator::~CachingAllocator() {
  for (auto& [p, size] : sizes_) cudaFree(p);
}

}  // namespace shoal::cuda
