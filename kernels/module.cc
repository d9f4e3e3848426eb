// libshoal-cuda.so's one export (backend/module.h): the CUDA backend's entry points for
// backend/registry.cc, which loads this module on demand.
#include "backend/module.h"
#include "cuda_backend.h"

namespace {

const shoal::BackendModuleApi kApi = {
    shoal::kBackendModuleAbi,
    &shoal::cuda::DeviceCount,
    &shoal::cuda::MakeCudaBackend,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const shoal::BackendModuleApi* shoal_cuda_module_v1() { return &kApi; }
