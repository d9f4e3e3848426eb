// Chooses a backend from the --device flag.
#include <spdlog/spdlog.h>

#include "backend/backend.h"
#include "shoal/config.h"

namespace shoal {

#if SHOAL_HAVE_CUDA
// Defined in kernels/ when the CUDA backend is built.
StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(int device);
#endif

StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& device) {
  if (device == "cpu") return MakeCpuBackend();
  if (device == "auto") {
#if SHOAL_HAVE_CUDA
    auto cuda = MakeCudaBackend(0);
    if (cuda.ok()) {
      spdlog::info("device auto: using {}", (*cuda)->name());
      return cuda;
    }
    spdlog::info("device auto: using cpu ({})", cuda.status().message());
#else
    spdlog::info("device auto: using cpu (this build has no CUDA backend)");
#endif
    return MakeCpuBackend();
  }
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (device.size() > 5) {
      try {
        size_t used = 0;
        index = std::stoi(device.substr(5), &used);
        if (used != device.size() - 5 || index < 0) throw std::invalid_argument(device);
      } catch (const std::exception&) {
        return Status::InvalidArgument("bad --device '" + device + "': expected cuda:N with N >= 0");
      }
    }
#if SHOAL_HAVE_CUDA
    auto cuda = MakeCudaBackend(index);
    if (!cuda.ok()) return cuda.status().WithContext("--device " + device);
    spdlog::info("device {}: using {}", device, (*cuda)->name());
    return cuda;
#else
    return Status::Unavailable("--device " + device +
                               ": this build of Shoal has no CUDA backend (rebuild with nvcc present, "
                               "or use --device cpu)");
#endif
  }
  return Status::InvalidArgument("unknown --device '" + device + "': expected auto, cpu, cuda or cuda:N");
}

}  // namespace shoal
