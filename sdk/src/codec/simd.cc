#include "codec/simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace shoal::codec::simd {
namespace {

std::atomic<int> g_forced{-1};

Level Detect() {
  const char* env = std::getenv("SHOAL_SIMD");
  if (env && std::strcmp(env, "baseline") == 0) return Level::kBaseline;
  return Supported(Level::kAvx2) ? Level::kAvx2 : Level::kBaseline;
}

}  // namespace

bool Supported(Level level) {
  if (level == Level::kBaseline) return true;
#if SHOAL_HAVE_AVX2_BODIES
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

Level Active() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<Level>(forced);
  static const Level detected = Detect();
  return detected;
}

const char* Name(Level level) { return level == Level::kAvx2 ? "avx2" : "baseline"; }

void ForceForTesting(std::optional<Level> level) {
  g_forced.store(level && Supported(*level) ? static_cast<int>(*level) : -1, std::memory_order_relaxed);
}

}  // namespace shoal::codec::simd
