// The CUDA backend (DESIGN.md §3, §7): the Backend interface on one NVIDIA GPU, with cuBLAS
// for GEMM and one kernel file per op. Built only when SHOAL_HAVE_CUDA, into the module
// libshoal-cuda.so (module.cc; loaded on demand by backend/registry.cc) and into the GPU tests
// and benchmarks, which call kernels directly. It links the CUDA runtime statically and
// cuBLAS, never the driver library; DeviceCount() reports why no device is usable. Nothing
// outside kernels/ but those tests and benchmarks includes this header.
#pragma once

#include <memory>
#include <vector>
#include <string>

#include "backend/backend.h"
#include "backend/collective.h"
#include "shoal/status.h"

namespace shoal::cuda {

// Number of usable CUDA devices; an Unavailable error with CUDA's own error string when the
// runtime cannot report any (no driver, no device).
StatusOr<int> DeviceCount();

// The CUDA backend on device `index`.
StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(int index);

// NCCL: one Collective per device in `devices`, rank i on devices[i] (nccl_group.cc), or
// FailedPrecondition when this module was built without NCCL.
StatusOr<std::vector<std::unique_ptr<Collective>>> MakeNcclGroup(const std::vector<int>& devices);

// The cudaStream_t (as void*) all of a CUDA backend's work runs on; nullptr for other backends.
void* StreamOf(Backend* backend);

// Allocator figures of a CUDA backend made by this copy of the kernels (cuda::MakeCudaBackend,
// as GPU tests and benchmarks link them); zeros for others, including backends the module made.
struct MemoryStats {
  size_t in_use_bytes = 0, cached_bytes = 0, peak_bytes = 0;
  uint64_t reused = 0, device_allocs = 0;
};
MemoryStats MemoryStatsOf(Backend* backend);

}  // namespace shoal::cuda
