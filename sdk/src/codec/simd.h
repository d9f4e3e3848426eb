// Run-time SIMD dispatch for the codec's streaming kernels (issue 18).
//
// The library is built for baseline x86-64 (SSE2) so that it starts on any x86-64 CPU. Kernels
// that gain from wider vectors have a second body compiled for AVX2 with GCC's per-function
// target attribute (SHOAL_TARGET_AVX2), chosen once per call from Active(). Only the encoder's
// kernels and exactly-rounded operations are vectorized: every AVX2 body computes the same IEEE
// operations, in the same order, as its scalar twin (no FMA contraction, no reassociated
// sums: a lane-wise reduction keeps the scalar code's lane layout), so payloads and decoded
// values are bit-identical across levels and machines. The tests force each level in turn.
//
// SHOAL_SIMD=baseline in the environment forces the baseline bodies (read once).
#pragma once

#include <optional>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SHOAL_HAVE_AVX2_BODIES 1
#define SHOAL_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define SHOAL_HAVE_AVX2_BODIES 0
#define SHOAL_TARGET_AVX2
#endif

// Calling a kernel with a body per level: SHOAL_SIMD_CALL(Name, args...) calls NameAvx2 or
// NameBaseline by Active() (NameBaseline alone where no AVX2 bodies are built).
#if SHOAL_HAVE_AVX2_BODIES
#define SHOAL_SIMD_CALL(name, ...)                                                                      \
  (::shoal::codec::simd::Active() == ::shoal::codec::simd::Level::kAvx2 ? name##Avx2(__VA_ARGS__) \
                                                                        : name##Baseline(__VA_ARGS__))
#else
#define SHOAL_SIMD_CALL(name, ...) name##Baseline(__VA_ARGS__)
#endif

// A kernel written once as an [[gnu::always_inline]] NameBody, compiled at each level:
// SHOAL_SIMD_CLONES(ret, Name, (params...), (args...)) defines NameBaseline and NameAvx2, each
// `return NameBody(args...)`. The compiler vectorizes the same source for each ISA; with
// -ffp-contract=off both compute the same IEEE operations.
#if SHOAL_HAVE_AVX2_BODIES
#define SHOAL_SIMD_CLONES(ret, name, params, args)                 \
  ret name##Baseline params { return name##Body args; }             \
  SHOAL_TARGET_AVX2 ret name##Avx2 params { return name##Body args; }
#else
#define SHOAL_SIMD_CLONES(ret, name, params, args) \
  ret name##Baseline params { return name##Body args; }
#endif

namespace shoal::codec::simd {

enum class Level { kBaseline, kAvx2 };

// The level kernels use: a forced one (tests), else AVX2 when this build has AVX2 bodies, the
// CPU supports AVX2 and SHOAL_SIMD is not "baseline"; else baseline.
Level Active();
// True when `level` can run here.
bool Supported(Level level);
const char* Name(Level level);
// Forces `level` (which must be Supported) for the whole process, or with nullopt returns to
// the automatic choice. Tests and benchmarks only: not synchronized with kernels running on other threads.
void ForceForTesting(std::optional<Level> level);

}  // namespace shoal::codec::simd
