// Baselines for bench/backend_bench.cc, measured in the same run as Shoal's kernels: a plain
// cuBLAS SGEMM of a shape, and device-to-device cudaMemcpy bandwidth. Host-visible (no CUDA
// types); `backend` must be a CUDA backend, whose device and stream are used.
#pragma once

#include <cstddef>

#include "backend/backend.h"

namespace shoal::cuda {

// Seconds per call of cublasSgemm (fp32) on m x n x k, best of `reps` (after a warm-up call),
// on buffers the function allocates itself.
double PlainSgemmSeconds(Backend& backend, int m, int n, int k, int reps);
// GB/s (1e9 bytes copied per second) of cudaMemcpyAsync device to device of `bytes`, best of `reps`.
double DeviceMemcpyGBps(Backend& backend, size_t bytes, int reps);

}  // namespace shoal::cuda
