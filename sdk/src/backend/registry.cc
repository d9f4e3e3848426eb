// Chooses a backend from the --device flag. The CPU backend is part of libshoal; the CUDA
// backend is the module libshoal-cuda.so (backend/module.h), loaded here the first time a CUDA
// device is asked for, and only when an NVIDIA driver is present, so a process on a machine
// without one never maps CUDA or cuBLAS.
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "backend/backend.h"
#include "backend/module.h"
#include "shoal/config.h"

namespace shoal {
namespace {

// The module, or why there is none; loaded once per process and never unloaded (backends it
// made may live until exit).
struct CudaModule {
  const BackendModuleApi* api = nullptr;
  Status error;
};

// Where to look for the module, in order.
std::vector<std::string> ModuleCandidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("SHOAL_CUDA_MODULE"); env && *env) out.emplace_back(env);
  // The folder of the object this code lives in: libshoal.so, or an executable linking libshoal.a.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ModuleCandidates), &info) && info.dli_fname) {
    const std::filesystem::path self = std::filesystem::path(info.dli_fname).parent_path();
    out.push_back((self / kCudaModuleFile).string());
    out.push_back((self / SHOAL_BIN_TO_LIB_DIR / kCudaModuleFile).string());
  }
  out.emplace_back(kCudaModuleFile);  // the loader's search path (LD_LIBRARY_PATH, ld.so.cache)
  return out;
}

CudaModule LoadCudaModule() {
  CudaModule m;
  if (!SHOAL_HAVE_CUDA) {
    m.error = Status::Unavailable("this build of Shoal has no CUDA backend (rebuild with nvcc present, or use --device cpu)");
    return m;
  }
  // The driver first: without it the module could only report that no device is usable, at
  // the price of mapping the CUDA runtime and cuBLAS.
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    m.error = Status::Unavailable(std::string("no NVIDIA driver on this machine (") + dlerror() + ")");
    return m;
  }
  std::string tried;
  for (const std::string& path : ModuleCandidates()) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      tried += (tried.empty() ? "" : "; ") + std::string(dlerror());
      continue;
    }
    auto entry = reinterpret_cast<ShoalBackendModuleEntry>(dlsym(handle, kCudaModuleSymbol));
    if (entry == nullptr) {
      m.error = Status::Unavailable(path + " is not a Shoal CUDA module (no " + kCudaModuleSymbol + ")");
      return m;
    }
    const BackendModuleApi* api = entry();
    if (api == nullptr || api->abi != kBackendModuleAbi) {
      m.error = Status::Unavailable(path + " was built for backend ABI " + std::to_string(api ? api->abi : 0) +
                                    ", this library speaks " + std::to_string(kBackendModuleAbi) +
                                    ": install the libshoal-cuda.so of the same build");
      return m;
    }
    spdlog::debug("loaded the CUDA backend module {}", path);
    m.api = api;
    return m;
  }
  m.error = Status::Unavailable(std::string("the CUDA backend module ") + kCudaModuleFile +
                                " was not found beside libshoal or the program (set SHOAL_CUDA_MODULE to its path): " +
                                tried);
  return m;
}

const CudaModule& Cuda() {
  static const CudaModule module = LoadCudaModule();
  return module;
}

StatusOr<std::unique_ptr<Backend>> MakeCuda(int index) {
  const CudaModule& m = Cuda();
  if (!m.api) return m.error;
  return m.api->make_backend(index);
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& device) {
  if (device == "cpu") return MakeCpuBackend();
  if (device == "auto") {
    auto cuda = MakeCuda(0);
    if (cuda.ok()) {
      spdlog::info("device auto: using {}", (*cuda)->name());
      return cuda;
    }
    spdlog::info("device auto: using cpu ({})", cuda.status().message());
    return MakeCpuBackend();
  }
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    SHOAL_ASSIGN_OR_RETURN(const int index, CudaDeviceIndex(device));
    auto cuda = MakeCuda(index);
    if (!cuda.ok()) return cuda.status().WithContext("--device " + device);
    spdlog::info("device {}: using {}", device, (*cuda)->name());
    return cuda;
  }
  return Status::InvalidArgument("unknown --device '" + device + "': expected auto, cpu, cuda or cuda:N");
}

StatusOr<int> CudaDeviceIndex(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      const int index = std::stoi(device.substr(5), &used);
      if (used == device.size() - 5 && index >= 0) return index;
    } catch (const std::exception&) {
    }
  }
  return Status::InvalidArgument("bad --device '" + device + "': expected cuda or cuda:N with N >= 0");
}

StatusOr<std::vector<std::unique_ptr<Collective>>> MakeCollectiveGroup(const std::vector<std::string>& devices) {
  if (devices.empty()) return Status::InvalidArgument("a data-parallel group needs at least one rank");
  if (std::all_of(devices.begin(), devices.end(), [](const std::string& d) { return d == "cpu"; }))
    return MakeThreadGroup(static_cast<int>(devices.size()));
  std::vector<int> gpus;
  for (const std::string& d : devices) {
    auto index = CudaDeviceIndex(d);
    if (!index.ok()) return Status::InvalidArgument("the ranks of one group must be all cpu or all cuda:N, got " + d);
    gpus.push_back(*index);
    if (std::count(gpus.begin(), gpus.end(), gpus.back()) > 1)
      return Status::InvalidArgument("two ranks on " + d + ": one rank per GPU");
  }
  const CudaModule& m = Cuda();
  if (!m.api) return m.error;
  return m.api->make_nccl_group(gpus);
}

}  // namespace shoal
