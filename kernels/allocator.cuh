// Device memory through one caching allocator: freed blocks go to free lists by size and are
// reused, so a training loop that allocates and frees the same scratch sizes every step never
// calls cudaMalloc/cudaFree (which synchronize the device) after warm-up. Blocks are reused in
// stream order: the backend runs everything on one stream, so a block freed by the host can be
// handed out again at once. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

namespace shoal::cuda {

class CachingAllocator {
 public:
  CachingAllocator() = default;
  ~CachingAllocator();  // returns every block to the device
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nullptr when the device is out of memory even after the cache was released.
  void* Alloc(size_t bytes);
  void Free(void* p);
  // Returns the cached (free) blocks to the device.
  void ReleaseCache();

  struct Stats {
    size_t in_use_bytes = 0;   // handed out and not freed
    size_t cached_bytes = 0;   // free, kept for reuse
    size_t peak_bytes = 0;     // largest in_use + cached
    uint64_t reused = 0;       // Alloc calls served from the cache
    uint64_t device_allocs = 0;  // Alloc calls that reached cudaMalloc
  };
  Stats stats() const;

  // Sizes are rounded up: to 512 bytes below 1 MiB, to 2 MiB above, so nearby sizes share bins.
  static size_t RoundUp(size_t bytes);

 private:
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;        // size -> block
  std::unordered_map<void*, size_t> sizes_;  // every live block (in use or free) -> size
  Stats stats_;
};

}  // namespace shoal::cuda
