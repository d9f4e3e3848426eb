// The backend registry (backend/registry.cc): the CPU backend always; the CUDA backend only as
// the module libshoal-cuda.so, loaded on demand. On a machine without a GPU driver asking for
// CUDA gives a clear error, "auto" falls back to the CPU, and nothing of CUDA or cuBLAS is mapped
// into the process (the point of the module: read /proc/self/maps, not a build flag).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "backend/backend.h"
#include "shoal/config.h"

namespace shoal {
namespace {

bool Mapped(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

bool DriverPresent() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  return h != nullptr;
}

TEST(BackendRegistry, CpuAlwaysAndUnknownDevicesRefused) {
  auto cpu = MakeBackend("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  EXPECT_EQ((*cpu)->name(), "cpu");
  auto bad = MakeBackend("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected auto, cpu, cuda or cuda:N"), std::string::npos);
  auto bad_index = MakeBackend("cuda:x");
  ASSERT_FALSE(bad_index.ok());
  EXPECT_NE(bad_index.status().message().find("cuda:N"), std::string::npos);
}

TEST(BackendRegistry, WithoutADriverCudaIsAClearErrorAndNothingIsMapped) {
  if (DriverPresent()) GTEST_SKIP() << "an NVIDIA driver is present: tests/cuda covers the module";
  EXPECT_FALSE(Mapped("libcublas")) << "cuBLAS mapped before any backend was asked for";
  auto cuda = MakeBackend("cuda");
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable);
  const std::string expected = SHOAL_HAVE_CUDA ? "no NVIDIA driver" : "no CUDA backend";
  EXPECT_NE(cuda.status().message().find(expected), std::string::npos) << cuda.status().message();
  auto fallback = MakeBackend("auto");
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ((*fallback)->name(), "cpu");
  EXPECT_FALSE(Mapped("libcublas"));
  EXPECT_FALSE(Mapped("libshoal-cuda"));
  EXPECT_FALSE(Mapped("libcudart"));
}

}  // namespace
}  // namespace shoal
