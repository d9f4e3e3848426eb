// Client-level clipping, one definition for both DP modes (the aggregator's central wrapper and
// each client's distributed share): scale a vector so its L2 norm is at most `bound`.
#pragma once

#include <cmath>
#include <span>

namespace shoal::privacy {

// Scales `v` by bound (1 - 2^-20) / ||v|| when ||v|| > bound (the margin keeps the rounded
// float result within the bound) and returns ||v|| before clipping, accumulated in double.
// A NaN norm leaves `v` as it is: the caller refuses it by the returned norm.
inline double ClipToNorm(std::span<float> v, double bound) {
  double sq = 0.0;
  for (float x : v) sq += static_cast<double>(x) * x;
  const double norm = std::sqrt(sq);
  if (norm > bound) {
    const double scale = bound * (1.0 - 0x1p-20) / norm;
    for (float& x : v) x = static_cast<float>(x * scale);
  }
  return norm;
}

}  // namespace shoal::privacy
