// Streaming kernels shared by the codec's pipeline and stages, each with a baseline body and an
// AVX2 body chosen at run time (simd.h); both give identical results.
#pragma once

#include <cstddef>
#include <span>

namespace shoal::codec::kernels {

inline constexpr size_t kAllFinite = static_cast<size_t>(-1);

// The index of the first value of v that is not finite, or kAllFinite.
size_t FirstNonFinite(std::span<const float> v);

// out[i] = fl(a[i] + b[i]) (error feedback's x = update + residual) in one pass that also
// checks the sums: returns the index of the first non-finite out[i], or kAllFinite. out may
// alias neither a nor b.
size_t AddChecked(std::span<const float> a, std::span<const float> b, std::span<float> out);

}  // namespace shoal::codec::kernels
