// Private helpers of the transform and selector stages (dct.cc, powersgd.cc, topk.cc, randk.cc):
// the per-chunk count rule shared by top-k and random-k, and DeMo's chunk-side rule plus the
// cached DCT-II matrices. (Parameters are checked by the registry, registry.h.)
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/codec.h"

namespace shoal::codec::detail {

// How many of `len` values a ratio/k selector keeps: k (when k > 0) or round(ratio * len), at
// least 1, at most len. Plain double arithmetic (IEEE, so the same on every machine).
inline size_t CountFor(size_t len, double ratio, size_t k) {
  if (len == 0) return 0;
  size_t c = k;
  if (c == 0) c = static_cast<size_t>(std::floor(ratio * static_cast<double>(len) + 0.5));
  if (c < 1) c = 1;
  return c < len ? c : len;
}
// Total over a tensor of n values, per tensor (chunk == 0) or per chunk (the last may be shorter).
inline size_t CountChunked(size_t n, size_t chunk, double ratio, size_t k) {
  if (chunk == 0 || chunk >= n) return CountFor(n, ratio, k);
  const size_t rem = n % chunk;
  return (n / chunk) * CountFor(chunk, ratio, k) + (rem ? CountFor(rem, ratio, k) : 0);
}

// DeMo's chunk side: the largest divisor of `dim` that is <= `chunk` (1 for a prime dim above
// chunk; 1 for dim <= 0).
inline int64_t LargestDivisorAtMost(int64_t dim, int64_t chunk) {
  if (dim <= 0 || chunk <= 0) return 1;
  if (dim <= chunk) return dim;
  for (int64_t d = chunk; d > 1; --d) {
    if (dim % d == 0) return d;
  }
  return 1;
}

// y[0..n) += a * x[0..n), each element one multiply and one add (no reassociation), so the bits
// do not depend on the machine; blocks of 8 let the compiler vectorize it at -O2.
[[gnu::always_inline]] inline void AxpyInOrder(float a, const float* __restrict x, float* __restrict y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) y[i + j] += a * x[i + j];
  for (; i < n; ++i) y[i] += a * x[i];
}

// The orthonormal DCT-II matrix of size n (row-major, D[k][i] = s_k cos(pi (2i+1) k / 2n),
// s_0 = sqrt(1/n), s_k = sqrt(2/n)), computed in double and rounded once to float. Cached per
// size for the life of the process; thread-safe; the reference stays valid.
const std::vector<float>& DctMatrix(int64_t n);

}  // namespace shoal::codec::detail
