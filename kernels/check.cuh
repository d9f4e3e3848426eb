// Error checks for CUDA runtime and cuBLAS calls inside the backend. An error here is a bug or
// a lost device (the backend validated the device when it was created), so it is fatal with
// the call, the error string, file and line; Status values stop at the backend's boundary.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace shoal::cuda {

[[noreturn]] void Fatal(const char* call, const char* error, const char* file, int line);

inline void Check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) Fatal(call, cudaGetErrorString(e), file, line);
}
inline void Check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) Fatal(call, cublasGetStatusString(s), file, line);
}

// Grid size for a grid-stride loop over n elements with `threads` per block.
inline unsigned GridFor(size_t n, unsigned threads = 256) {
  const size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks == 0 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

}  // namespace shoal::cuda

#define SHOAL_CUDA_CHECK(expr) ::shoal::cuda::Check((expr), #expr, __FILE__, __LINE__)
// After a kernel launch: launch errors are reported at once, execution errors at the next sync.
#define SHOAL_CUDA_LAUNCHED() SHOAL_CUDA_CHECK(cudaGetLastError())

// A grid-stride loop: every thread of the grid walks i = its index, + grid size, ... < n.
#define SHOAL_GRID_LOOP(i, n)                                                              \
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += static_cast<size_t>(blockDim.x) * gridDim.x)
