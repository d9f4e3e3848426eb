// Private helpers of the transform and selector stages (dct.cc, powersgd.cc, topk.cc, randk.cc):
// parameter parsing with errors that name the stage and the parameter, the per-chunk count rule
// shared by top-k and random-k, and DeMo's chunk-side rule plus the cached DCT-II matrices.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "codec/codec.h"

namespace shoal::codec::detail {

// Refuses a parameter not in `known` and a parameter given twice.
inline Status CheckParams(const StageSpec& spec, std::initializer_list<std::string_view> known) {
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const std::string& key = spec.params[i].first;
    bool ok = false;
    for (std::string_view k : known) ok = ok || key == k;
    if (!ok) {
      std::string list;
      for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return Status::InvalidArgument(spec.name + ": unknown parameter '" + key + "' (known: " +
                                     (list.empty() ? "none" : list) + ")");
    }
    for (size_t j = 0; j < i; ++j) {
      if (spec.params[j].first == key) {
        return Status::InvalidArgument(spec.name + ": parameter '" + key + "' given twice");
      }
    }
  }
  return Status::Ok();
}

inline const std::string* FindParam(const StageSpec& spec, std::string_view key) {
  for (const auto& [k, v] : spec.params) {
    if (k == key) return &v;
  }
  return nullptr;
}

// Integer parameter in [lo, hi]; *out keeps its default when the parameter is absent.
inline Status IntParam(const StageSpec& spec, std::string_view key, int64_t lo, int64_t hi, int64_t* out) {
  const std::string* v = FindParam(spec, key);
  if (!v) return Status::Ok();
  int64_t x = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), x);
  if (v->empty() || ec != std::errc() || end != v->data() + v->size()) {
    return Status::InvalidArgument(spec.name + ": parameter '" + std::string(key) + "' must be an integer, got '" +
                                   *v + "'");
  }
  if (x < lo || x > hi) {
    return Status::InvalidArgument(spec.name + ": parameter '" + std::string(key) + "' must be in [" +
                                   std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + *v + "'");
  }
  *out = x;
  return Status::Ok();
}

// Ratio parameter in (0, 1]; *out keeps its default when the parameter is absent.
inline Status RatioParam(const StageSpec& spec, std::string_view key, double* out) {
  const std::string* v = FindParam(spec, key);
  if (!v) return Status::Ok();
  double x = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), x);
  if (v->empty() || ec != std::errc() || end != v->data() + v->size() || !std::isfinite(x)) {
    return Status::InvalidArgument(spec.name + ": parameter '" + std::string(key) + "' must be a number, got '" +
                                   *v + "'");
  }
  if (!(x > 0.0 && x <= 1.0)) {
    return Status::InvalidArgument(spec.name + ": parameter '" + std::string(key) + "' must be in (0, 1], got '" +
                                   *v + "'");
  }
  *out = x;
  return Status::Ok();
}

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
inline void AxpyInOrder(float a, const float* __restrict x, float* __restrict y, int64_t n) {
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
