// The CUDA backend (DESIGN.md §3, §7): the Backend interface on one NVIDIA GPU, with cuBLAS
// for GEMM and one kernel file per op. Host code elsewhere in Shoal only sees this header and
// backend.h, never a CUDA header. Built only when SHOAL_HAVE_CUDA; the binaries link the CUDA
// runtime statically and cuBLAS, never the driver library, so they start on machines without
// a GPU driver, where DeviceCount() reports why no device is usable.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "shoal/status.h"

namespace shoal::cuda {

// Number of usable CUDA devices; an Unavailable error with CUDA's own error string when the
// runtime cannot report any (no driver, no device).
StatusOr<int> DeviceCount();

// The CUDA backend on device `index`.
StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(int index);

// The cudaStream_t (as void*) all of a CUDA backend's work runs on; nullptr for other backends.
void* StreamOf(Backend* backend);

// Allocator figures of a CUDA backend (zeros for other backends).
struct MemoryStats {
  size_t in_use_bytes = 0, cached_bytes = 0, peak_bytes = 0;
  uint64_t reused = 0, device_allocs = 0;
};
MemoryStats MemoryStatsOf(Backend* backend);

}  // namespace shoal::cuda
