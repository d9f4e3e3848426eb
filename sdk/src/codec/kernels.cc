// FirstNonFinite and AddChecked (kernels.h). A value is finite when its exponent bits are not
// all ones; both bodies test that on the bit pattern, so NaNs of any payload and +-Inf are
// caught alike. The fast loops only detect; the exact index comes from a scalar rescan.
#include "codec/kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "codec/simd.h"

#if SHOAL_HAVE_AVX2_BODIES
#include <immintrin.h>
#endif

namespace shoal::codec::kernels {
namespace {

constexpr uint32_t kExponent = 0x7f800000u;

size_t ScalarFirstNonFinite(const float* v, size_t from, size_t n) {
  for (size_t i = from; i < n; ++i)
    if (!std::isfinite(v[i])) return i;
  return kAllFinite;
}

// Baseline: 16 values per step, written so that GCC vectorizes it with SSE2.
size_t FirstNonFiniteBaseline(const float* v, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint32_t u[16];
    std::memcpy(u, v + i, sizeof u);
    uint32_t bad = 0;
    for (size_t j = 0; j < 16; ++j) bad |= static_cast<uint32_t>((u[j] & kExponent) == kExponent);
    if (bad) break;
  }
  return ScalarFirstNonFinite(v, i, n);
}

size_t AddCheckedBaseline(const float* a, const float* b, float* out, size_t n) {
  size_t i = 0;
  uint32_t bad = 0;
  for (; i + 16 <= n; i += 16) {
    float s[16];
    for (size_t j = 0; j < 16; ++j) s[j] = a[i + j] + b[i + j];
    uint32_t u[16];
    std::memcpy(u, s, sizeof u);
    for (size_t j = 0; j < 16; ++j) bad |= static_cast<uint32_t>((u[j] & kExponent) == kExponent);
    std::memcpy(out + i, s, sizeof s);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
  return ScalarFirstNonFinite(out, bad ? 0 : n - n % 16, n);  // the tail, or a rescan for the index
}

#if SHOAL_HAVE_AVX2_BODIES
SHOAL_TARGET_AVX2 size_t FirstNonFiniteAvx2(const float* v, size_t n) {
  const __m256i exp = _mm256_set1_epi32(static_cast<int>(kExponent));
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i bad = _mm256_setzero_si256();
    for (size_t k = 0; k < 32; k += 8) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + k));
      bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(u, exp), exp));
    }
    if (!_mm256_testz_si256(bad, bad)) break;
  }
  return ScalarFirstNonFinite(v, i, n);
}

SHOAL_TARGET_AVX2 size_t AddCheckedAvx2(const float* a, const float* b, float* out, size_t n) {
  const __m256i exp = _mm256_set1_epi32(static_cast<int>(kExponent));
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 s = _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(s), exp), exp));
    _mm256_storeu_ps(out + i, s);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
  return ScalarFirstNonFinite(out, _mm256_testz_si256(bad, bad) ? n - n % 8 : 0, n);
}
#endif

}  // namespace

size_t FirstNonFinite(std::span<const float> v) { return SHOAL_SIMD_CALL(FirstNonFinite, v.data(), v.size()); }

size_t AddChecked(std::span<const float> a, std::span<const float> b, std::span<float> out) {
  return SHOAL_SIMD_CALL(AddChecked, a.data(), b.data(), out.data(), a.size());
}

}  // namespace shoal::codec::kernels
