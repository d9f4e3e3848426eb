// The interface between libshoal and a backend module loaded on demand (ggml's dynamically
// loaded backends): today libshoal-cuda.so, built from kernels/. libshoal and the CLIs never
// link CUDA or cuBLAS; backend/registry.cc dlopens the module the first time a CUDA device is
// asked for, and only when an NVIDIA driver is present, so a process on a machine without a
// GPU maps none of it.
//
// The module exports one C symbol, shoal_cuda_module_v1, returning a table of entry points.
// The entry points pass C++ types (Status, Backend) across the boundary: the module is built
// from the same tree by the same compiler as the library that loads it (it is installed beside
// libshoal and versioned with it), and kBackendModuleAbi says which Backend interface it was
// built against; a module with another value is refused with a message that names both.
// Bump kBackendModuleAbi whenever backend.h's Backend class or this table changes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/collective.h"
#include "shoal/status.h"

namespace shoal {

// 2: GemmStridedBatched, CausalSoftmax; 3: Multiply, GeluWithDerivative; 4: make_nccl_group
inline constexpr uint32_t kBackendModuleAbi = 4;
// The file the registry looks for (beside libshoal, in ../lib from the executable's folder, in
// $SHOAL_CUDA_MODULE, then on the loader's search path).
inline constexpr const char* kCudaModuleFile = "libshoal-cuda.so";
inline constexpr const char* kCudaModuleSymbol = "shoal_cuda_module_v1";

struct BackendModuleApi {
  uint32_t abi;  // kBackendModuleAbi of the module's build
  // Usable devices, or Unavailable with the runtime's own reason.
  StatusOr<int> (*device_count)();
  // The backend on device `index`.
  StatusOr<std::unique_ptr<Backend>> (*make_backend)(int index);
  // NCCL: a data-parallel group of one rank per device in `devices` (threads of this process;
  // kernels/nccl_group.cc). Unimplemented when the module was built without NCCL.
  StatusOr<std::vector<std::unique_ptr<Collective>>> (*make_nccl_group)(const std::vector<int>& devices);
};

}  // namespace shoal

extern "C" {
// Defined by the module; never by libshoal.
typedef const shoal::BackendModuleApi* (*ShoalBackendModuleEntry)();
}
