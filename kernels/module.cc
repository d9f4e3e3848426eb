// libshoal-cuda.so's one export (backend/module.h): the CUDA backend's entry points for
// backend/registry.cc, which loads this module on demand.
#include "backend/module.h"
#include "cuda_backend.h"

#if !SHOAL_HAVE_NCCL
namespace shoal::cuda {
StatusOr<std::vector<std::unique_ptr<Collective>>> MakeNcclGroup(const std::vector<int>&) {
  return Status::FailedPrecondition("this CUDA module was built without NCCL (no nccl.h and libnccl in the CUDA toolkit)");
}
}  // namespace shoal::cuda
#endif

namespace {

const shoal::BackendModuleApi kApi = {
    shoal::kBackendModuleAbi,
    &shoal::cuda::DeviceCount,
    &shoal::cuda::MakeCudaBackend,
    &shoal::cuda::MakeNcclGroup,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const shoal::BackendModuleApi* shoal_cuda_module_v1() { return &kApi; }
