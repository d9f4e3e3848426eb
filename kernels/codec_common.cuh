// Shared by the codec kernel files: the CUDA backend's stream and scratch allocation.
#pragma once
#include <cuda_runtime.h>

#include "backend/backend.h"
#include "check.cuh"
#include "cuda_backend.h"

namespace shoal::cuda {

inline cudaStream_t StreamFor(Backend& backend) {
  void* s = StreamOf(&backend);
  if (s == nullptr) Fatal("codec kernel", "the backend is not a CUDA backend", __FILE__, __LINE__);
  return static_cast<cudaStream_t>(s);
}

// Device scratch from the backend's allocator, freed (in stream order) at scope exit.
class TempBuffer {
 public:
  TempBuffer(Backend& backend, size_t bytes) : backend_(backend), p_(bytes ? backend.AllocBytes(bytes) : nullptr) {}
  ~TempBuffer() {
    if (p_) backend_.FreeBytes(p_);
  }
  TempBuffer(const TempBuffer&) = delete;
  TempBuffer& operator=(const TempBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  Backend& backend_;
  void* p_;
};

}  // namespace shoal::cuda
