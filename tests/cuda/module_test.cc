// libshoal-cuda.so as a module (backend/module.h): it loads without a driver, exports its one
// entry point, speaks this library's backend ABI, and answers the device count (a reason when
// there is no device). The registry's refusal without a driver is in unit/backend.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include "backend/module.h"

namespace shoal {
namespace {

const std::string kModule = std::string(SHOAL_LIB_DIR) + "/" + kCudaModuleFile;

TEST(CudaModule, LoadsAndSpeaksThisAbi) {
  void* handle = dlopen(kModule.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto entry = reinterpret_cast<ShoalBackendModuleEntry>(dlsym(handle, kCudaModuleSymbol));
  ASSERT_NE(entry, nullptr) << dlerror();
  const BackendModuleApi* api = entry();
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->abi, kBackendModuleAbi);
  auto n = api->device_count();
  if (!n.ok()) {
    EXPECT_EQ(n.status().code(), StatusCode::kUnavailable);
    auto be = api->make_backend(0);
    EXPECT_FALSE(be.ok());
  } else {
    EXPECT_GE(*n, 0);
  }
}

TEST(CudaModule, ExportsOnlyItsEntryPoint) {
  const std::string cmd = "nm -D --defined-only " + kModule + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  ASSERT_NE(pipe, nullptr);
  std::array<char, 512> line{};
  std::string exported;  // the names `nm` lists, one per line
  while (fgets(line.data(), line.size(), pipe.get())) {
    std::string s(line.data());
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    exported += s.substr(s.rfind(' ') + 1) + "\n";
  }
  EXPECT_EQ(exported, std::string(kCudaModuleSymbol) + "\n");
}

}  // namespace
}  // namespace shoal
