// Top-k by magnitude (stage "topk", StageId::kTopK).
//
// Order: values are ranked by |v| (the bit pattern of v with its sign cleared, so -0 == +0 and
// a NaN ranks above +Inf), ties broken by the lower index. Select returns the first k of that
// order, sorted by index; k = Count(len) per tensor (chunk == 0) or per chunk.
//
// Exact mode (approx=0) returns exactly that set. For a large tensor it first estimates a
// threshold from a deterministic stratified sample (65536 positions), collects the indices at
// or above it in one branch-free pass and finds the exact k-th key among those candidates
// (the candidates provably contain the top k when there are at least k of them; otherwise the
// sample threshold is lowered and the pass repeated). A small range with k <= 64 (DeMo's
// per-chunk top-k) bounds the k-th key from below by the smallest of S >= k slot maxima
// (SelectSmall) and selects exactly among the few candidates above it; other small ranges use
// nth_element. The candidate scans and slot maxima have AVX2 bodies (simd.h): integer
// compares of the same keys, so the selected set is the same at every level.
//
// Approximate mode (approx=1) ranks by the magnitude truncated to its top 16 bits (bf16
// truncation: exponent and 7 mantissa bits), ties by the lower index, and returns exactly
// Count values. Bound: every selected |v| >= trunc16(m_k) >= m_k * (1 - 2^-7) for normal
// floats, where m_k is the exact k-th largest |v|; equivalently every unselected value is
// below every selected one by at most a factor (1 + 2^-7). Its k-th key comes from a histogram
// of the candidates instead of nth_element.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

#include "codec/kernels.h"
#include "codec/simd.h"
#include "codec/stages.h"
#include "codec/xform_params.h"
#include "core/rng.h"

#if SHOAL_HAVE_AVX2_BODIES
#include <immintrin.h>
#endif

namespace shoal::codec {
namespace {

constexpr uint32_t kExactMask = 0x7fffffffu;
constexpr uint32_t kApproxMask = 0x7fff0000u;

inline uint32_t Key(float x, uint32_t mask) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u & mask;
}

// Appends the indices base+i of the k entries of v[0, len) ranked first (key desc, index asc),
// given T = the k-th largest key: every key > T, then the lowest-indexed keys == T.
void EmitRange(const float* v, size_t len, uint32_t base, size_t k, uint32_t t, uint32_t mask,
               std::vector<uint32_t>* out) {
  size_t above = 0;
  for (size_t i = 0; i < len; ++i) above += Key(v[i], mask) > t;
  size_t eq = k - above;
  // Branch-free: write every index, advance only over the kept ones.
  const size_t start = out->size();
  out->resize(start + len);
  uint32_t* o = out->data() + start;
  size_t c = 0;
  for (size_t i = 0; i < len; ++i) {
    const uint32_t key = Key(v[i], mask);
    const size_t take_eq = (key == t) & (eq > 0);
    o[c] = base + static_cast<uint32_t>(i);
    c += (key > t) | take_eq;
    eq -= take_eq;
  }
  out->resize(start + c);
}

// Appends to (o, ok) from position c every i in [b, e) with key(v[i]) >= t, and its key, in
// index order; returns the new count. The caller guarantees room for e - b more.
size_t CollectBaseline(const float* v, size_t b, size_t e, uint32_t t, uint32_t mask, uint32_t* o, uint32_t* ok,
                       size_t c) {
  size_t i = b;
  // Skip groups of 16 with no candidate (a cheap vectorizable test: keys < 2^31).
  for (; i + 16 <= e; i += 16) {
    int32_t hit = 0;
    for (size_t j = 0; j < 16; ++j) hit |= static_cast<int32_t>(Key(v[i + j], mask)) >= static_cast<int32_t>(t);
    if (!hit) continue;
    for (size_t j = i; j < i + 16; ++j) {
      const uint32_t key = Key(v[j], mask);
      o[c] = static_cast<uint32_t>(j);
      ok[c] = key;
      c += key >= t;
    }
  }
  for (; i < e; ++i) {
    const uint32_t key = Key(v[i], mask);
    o[c] = static_cast<uint32_t>(i);
    ok[c] = key;
    c += key >= t;
  }
  return c;
}

#if SHOAL_HAVE_AVX2_BODIES
// 32 keys per test; hits are taken from the compare's bit mask, lowest index first.
SHOAL_TARGET_AVX2 size_t CollectAvx2(const float* v, size_t b, size_t e, uint32_t t, uint32_t mask, uint32_t* o,
                                     uint32_t* ok, size_t c) {
  const __m256i vmask = _mm256_set1_epi32(static_cast<int>(mask));
  const __m256i below = _mm256_set1_epi32(static_cast<int>(t) - 1);  // keys < 2^31: key >= t <=> key > t - 1
  size_t i = b;
  for (; i + 32 <= e; i += 32) {
    __m256i keys[4];
    uint32_t bits = 0;
    for (int k = 0; k < 4; ++k) {
      keys[k] = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 8 * k)), vmask);
      bits |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(keys[k], below)))) << (8 * k);
    }
    if (!bits) continue;
    alignas(32) uint32_t kv[32];
    for (int k = 0; k < 4; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(kv + 8 * k), keys[k]);
    for (; bits; bits &= bits - 1) {
      const int j = __builtin_ctz(bits);
      o[c] = static_cast<uint32_t>(i + static_cast<size_t>(j));
      ok[c] = kv[j];
      ++c;
    }
  }
  return CollectBaseline(v, i, e, t, mask, o, ok, c);
}
#endif

size_t Collect(const float* v, size_t b, size_t e, uint32_t t, uint32_t mask, uint32_t* o, uint32_t* ok, size_t c) {
  return SHOAL_SIMD_CALL(Collect, v, b, e, t, mask, o, ok, c);
}

#if SHOAL_HAVE_AVX2_BODIES
// CollectAvx2 over x = fl(a + b), which it stores, in the same pass; *bad set on a non-finite x.
SHOAL_TARGET_AVX2 size_t CollectSumAvx2(const float* a, const float* bb, float* x, size_t b, size_t e, uint32_t t,
                                        uint32_t mask, uint32_t* o, uint32_t* ok, size_t c, bool* bad) {
  const __m256i vmask = _mm256_set1_epi32(static_cast<int>(mask));
  const __m256i below = _mm256_set1_epi32(static_cast<int>(t) - 1);
  const __m256i exp = _mm256_set1_epi32(0x7f800000);
  __m256i nonfinite = _mm256_setzero_si256();
  size_t i = b;
  for (; i + 32 <= e; i += 32) {
    __m256i keys[4];
    __m256i most = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_add_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(bb + i + 8 * k));
      _mm256_storeu_ps(x + i + 8 * k, v);
      const __m256i bits = _mm256_castps_si256(v);
      nonfinite = _mm256_or_si256(nonfinite, _mm256_cmpeq_epi32(_mm256_and_si256(bits, exp), exp));
      keys[k] = _mm256_and_si256(bits, vmask);
      most = _mm256_max_epu32(most, keys[k]);
    }
    if (_mm256_testz_si256(_mm256_cmpgt_epi32(most, below), _mm256_cmpgt_epi32(most, below))) continue;
    alignas(32) uint32_t kv[32];
    uint32_t hits = 0;
    for (int k = 0; k < 4; ++k) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(kv + 8 * k), keys[k]);
      hits |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(keys[k], below)))) << (8 * k);
    }
    for (; hits; hits &= hits - 1) {
      const int j = __builtin_ctz(hits);
      o[c] = static_cast<uint32_t>(i + static_cast<size_t>(j));
      ok[c] = kv[j];
      ++c;
    }
  }
  if (!_mm256_testz_si256(nonfinite, nonfinite)) *bad = true;
  for (size_t j = i; j < e; ++j) {
    x[j] = a[j] + bb[j];
    if (!std::isfinite(x[j])) *bad = true;
  }
  return CollectBaseline(x, i, e, t, mask, o, ok, c);
}
#endif

// Collect over x = fl(a + b), stored into x in the same pass (error feedback's sum); *bad set
// when some x is not finite.
size_t CollectSum(const float* a, const float* bb, float* x, size_t b, size_t e, uint32_t t, uint32_t mask, uint32_t* o,
                  uint32_t* ok, size_t c, bool* bad) {
#if SHOAL_HAVE_AVX2_BODIES
  if (simd::Active() == simd::Level::kAvx2) return CollectSumAvx2(a, bb, x, b, e, t, mask, o, ok, c, bad);
#endif
  if (kernels::AddChecked({a + b, e - b}, {bb + b, e - b}, {x + b, e - b}) != kernels::kAllFinite) *bad = true;
  return CollectBaseline(x, b, e, t, mask, o, ok, c);
}


// M[j] = the largest key among v[j], v[j + S], v[j + 2S], ... (j < S <= len).
// Slots in groups of 8 with a fixed inner width, so that the compiler keeps them in vectors.
[[gnu::always_inline]] inline void SlotMaxBody(const float* v, size_t len, size_t S, uint32_t mask, uint32_t* M) {
  for (size_t j = 0; j < S; ++j) M[j] = 0;
  size_t i = 0;
  for (; i + S <= len; i += S) {
    for (size_t g = 0; g < S; g += 8) {
      uint32_t m[8];
      std::memcpy(m, M + g, sizeof m);
      for (size_t j = 0; j < 8; ++j) m[j] = std::max(m[j], Key(v[i + g + j], mask));
      std::memcpy(M + g, m, sizeof m);
    }
  }
  for (size_t j = 0; i + j < len; ++j) M[j] = std::max(M[j], Key(v[i + j], mask));
}
SHOAL_SIMD_CLONES(void, SlotMax, (const float* v, size_t len, size_t S, uint32_t mask, uint32_t* M), (v, len, S, mask, M))

// Of c candidates (indices `cand` within a range starting at `base`, their keys `ckeys`, in
// index order) that hold the top k, t being the k-th largest key: writes base + index of the
// top k to `out` in index order, every key > t and then the lowest-indexed keys == t; returns
// how many (k). Branch-free: every candidate is written and only the kept ones advance, so
// `out` needs room for c.
size_t EmitTopK(const uint32_t* cand, const uint32_t* ckeys, size_t c, size_t k, uint32_t t, uint32_t base,
                uint32_t* out) {
  size_t above = 0;
  for (size_t j = 0; j < c; ++j) above += ckeys[j] > t;
  size_t eq = k - above, m = 0;
  for (size_t j = 0; j < c; ++j) {
    const size_t take_eq = (ckeys[j] == t) & (eq > 0);
    out[m] = base + cand[j];
    m += (ckeys[j] > t) | take_eq;
    eq -= take_eq;
  }
  return m;
}

#if SHOAL_HAVE_AVX2_BODIES
// For each 8-bit mask, the lane order that moves the set lanes to the front (left-packing with
// _mm256_permutevar8x32_epi32).
struct PackTable {
  alignas(32) uint32_t lanes[256][8];
  constexpr PackTable() : lanes{} {
    for (uint32_t m = 0; m < 256; ++m) {
      uint32_t n = 0;
      for (uint32_t j = 0; j < 8; ++j)
        if (m & (1u << j)) lanes[m][n++] = j;
      for (; n < 8; ++n) lanes[m][n] = 0;
    }
  }
};
constexpr PackTable kPack;

SHOAL_TARGET_AVX2 inline uint32_t HorizontalMin(__m256i v) {
  __m128i m = _mm_min_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_min_epu32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_min_epu32(m, _mm_shuffle_epi32(m, 0xb1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}

// SelectSmall for k <= 8 in registers: 8 slot maxima, their minimum L, the candidates >= L
// left-packed into (ci, ck) (room for len + 8), the k-th key by counting, then the emission.
// Appends the top k to out[0, k) and returns true; false (nothing written) when more than 64
// candidates pass, which the generic path then handles.
SHOAL_TARGET_AVX2 bool SmallTopKAvx2(const float* v, size_t len, uint32_t base, size_t k, uint32_t mask,
                                     uint32_t* ci, uint32_t* ck, uint32_t* out) {
  const __m256i vmask = _mm256_set1_epi32(static_cast<int>(mask));
  __m256i most = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= len; i += 8)
    most = _mm256_max_epu32(most, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)), vmask));
  alignas(32) uint32_t m[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(m), most);
  for (size_t j = 0; i + j < len; ++j) m[j] = std::max(m[j], Key(v[i + j], mask));
  const uint32_t low = HorizontalMin(_mm256_load_si256(reinterpret_cast<const __m256i*>(m)));

  const __m256i below = _mm256_set1_epi32(static_cast<int>(low) - 1);  // keys < 2^31
  __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i eight = _mm256_set1_epi32(8);
  size_t c = 0;
  for (i = 0; i + 8 <= len; i += 8) {
    const __m256i keys = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)), vmask);
    const uint32_t bits = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(keys, below))));
    const __m256i order = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPack.lanes[bits]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ck + c), _mm256_permutevar8x32_epi32(keys, order));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ci + c), _mm256_permutevar8x32_epi32(index, order));
    c += static_cast<size_t>(__builtin_popcount(bits));
    index = _mm256_add_epi32(index, eight);
  }
  for (; i < len; ++i) {
    const uint32_t key = Key(v[i], mask);
    ci[c] = static_cast<uint32_t>(i);
    ck[c] = key;
    c += key >= low;
  }
  if (c > 64) return false;

  // t = the smallest candidate key with fewer than k candidate keys above it.
  for (size_t j = c; j < c + 8; ++j) ck[j] = 0;
  const __m256i kk = _mm256_set1_epi32(static_cast<int>(k));
  const __m256i all = _mm256_set1_epi32(-1);
  __m256i tmin = all;
  for (size_t j = 0; j < c; j += 8) {
    const __m256i kj = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ck + j));
    __m256i above = _mm256_setzero_si256();
    for (size_t q = 0; q < c; ++q)
      above = _mm256_sub_epi32(above, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(ck[q])), kj));
    const __m256i lane = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i ok = _mm256_and_si256(_mm256_cmpgt_epi32(kk, above),
                                        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(c)), lane));
    tmin = _mm256_min_epu32(tmin, _mm256_blendv_epi8(all, kj, ok));
  }
  const uint32_t t = HorizontalMin(tmin);

  uint32_t picked[64];  // EmitTopK writes every candidate (c <= 64)
  std::memcpy(out, picked, EmitTopK(ci, ck, c, k, t, base, picked) * sizeof(uint32_t));
  return true;
}
#endif

// The k-th largest (1 <= k <= keys.size()) of keys; reorders keys.
uint32_t KthLargest(std::vector<uint32_t>& keys, size_t k, bool histogram) {
  if (keys.size() <= 64) {
    // Few keys (per-chunk candidates): the k-th largest is the smallest key with fewer than k
    // keys above it. Branch-free counting, which vectorizes; nth_element mispredicts here.
    const size_t c = keys.size();
    const uint32_t* key = keys.data();
    uint32_t t = UINT32_MAX;
    for (size_t j = 0; j < c; ++j) {
      uint32_t above = 0;
      for (size_t i = 0; i < c; ++i) above += key[i] > key[j];
      t = above < k ? std::min(t, key[j]) : t;
    }
    return t;
  }
  if (histogram) {  // keys are multiples of 2^16 below 2^31: 32768 bins
    std::vector<uint32_t> hist(1u << 15, 0);
    for (uint32_t key : keys) ++hist[key >> 16];
    size_t cum = 0;
    for (size_t b = hist.size(); b-- > 0;) {
      cum += hist[b];
      if (cum >= k) return static_cast<uint32_t>(b << 16);
    }
    return 0;
  }
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(k - 1), keys.end(),
                   std::greater<uint32_t>());
  return keys[k - 1];
}

class TopK final : public Selector {
 public:
  TopK(double ratio, size_t k, bool approx) : ratio_(ratio), k_(k), approx_(approx) {}

  StageId id() const override { return StageId::kTopK; }

  size_t Count(size_t n, size_t chunk) const override { return detail::CountChunked(n, chunk, ratio_, k_); }

  void Select(std::span<const float> values, size_t chunk, const RoundContext& ctx, size_t tensor_index,
              std::vector<uint32_t>* indices) const override {
    indices->clear();
    const size_t n = values.size();
    if (n == 0) return;
    indices->reserve(Count(n, chunk));
    Scratch& s = ThreadScratch();
    if (chunk == 0 || chunk >= n) {
      SelectRange(values.data(), n, 0, detail::CountFor(n, ratio_, k_), &s, indices);
      return;
    }
    for (size_t b = 0; b < n; b += chunk) {
      const size_t len = std::min(chunk, n - b);
      SelectRange(values.data() + b, len, static_cast<uint32_t>(b), detail::CountFor(len, ratio_, k_), &s, indices);
    }
  }

  // A whole large tensor folds the sum into its collection pass; anything else adds first.
  bool SelectSum(std::span<const float> a, std::span<const float> b, std::span<float> x, size_t chunk,
                 const RoundContext& ctx, size_t tensor_index, std::vector<uint32_t>* indices) const override {
    const size_t n = a.size();
    const size_t k = detail::CountFor(n, ratio_, k_);
    if ((chunk != 0 && chunk < n) || !LargePath(n, k)) return Selector::SelectSum(a, b, x, chunk, ctx, tensor_index, indices);
    indices->clear();
    indices->reserve(k);
    const Sum sum{a.data(), b.data(), x.data()};
    return SelectLarge(x.data(), n, 0, k, approx_ ? kApproxMask : kExactMask, &ThreadScratch(), indices, &sum);
  }

 private:
  static bool LargePath(size_t len, size_t k) { return len >= (size_t{1} << 18) && k <= len / 4; }

  struct Scratch {
    std::vector<uint32_t> keys, cand, ckeys, sample;
  };
  // One per thread, shared by Select and SelectSum, kept across calls: no allocation once warm.
  static Scratch& ThreadScratch() {
    thread_local Scratch s;
    return s;
  }

  void SelectRange(const float* v, size_t len, uint32_t base, size_t k, Scratch* s, std::vector<uint32_t>* out) const {
    const uint32_t mask = approx_ ? kApproxMask : kExactMask;
    if (k >= len) {
      for (size_t i = 0; i < len; ++i) out->push_back(base + static_cast<uint32_t>(i));
      return;
    }
    if (LargePath(len, k)) {
      (void)SelectLarge(v, len, base, k, mask, s, out);
      return;
    }
    if (const size_t slots = (k + 7) / 8 * 8; k <= 64 && len >= 2 * slots) {
      SelectSmall(v, len, base, k, slots, mask, s, out);
      return;
    }
    s->keys.resize(len);
    for (size_t i = 0; i < len; ++i) s->keys[i] = Key(v[i], mask);
    const uint32_t t = KthLargest(s->keys, k, false);
    EmitRange(v, len, base, k, t, mask, out);
  }

  // Sampled threshold, one collection pass, exact k-th key among the candidates. With `sum`
  // (error feedback fused in), v is written in the first collection pass: v[i] = fl(a[i] + b[i]),
  // block by block (each block's sum is collected from L1), and the sample is read from a + b.
  // Returns false when some v[i] is not finite (out then unspecified).
  struct Sum {
    const float* a;
    const float* b;
    float* x;  // == v
  };
  bool SelectLarge(const float* v, size_t len, uint32_t base, size_t k, uint32_t mask, Scratch* s,
                   std::vector<uint32_t>* out, const Sum* sum = nullptr) const {
    const size_t ns = std::min<size_t>(size_t{1} << 16, len / 16);
    const size_t stride = len / ns;
    std::vector<uint32_t>& sample = s->sample;
    sample.resize(ns);
    Rng rng(0x746f706b /* "topk" */, len);
    // The positions first, then the loads with a prefetch ahead: each sample is a cache miss.
    for (size_t i = 0; i < ns; ++i) sample[i] = static_cast<uint32_t>(i * stride + rng.Below(stride));
    constexpr size_t kAhead = 16;
    for (size_t i = 0; i < ns; ++i) {
      const uint32_t p = sample[i];
      if (sum) {
        if (i + kAhead < ns) {
          __builtin_prefetch(sum->a + sample[i + kAhead]);
          __builtin_prefetch(sum->b + sample[i + kAhead]);
        }
        sample[i] = Key(sum->a[p] + sum->b[p], mask);
      } else {
        if (i + kAhead < ns) __builtin_prefetch(v + sample[i + kAhead]);
        sample[i] = Key(v[p], mask);
      }
    }
    const double expect = static_cast<double>(k) * static_cast<double>(ns) / static_cast<double>(len);
    size_t rank = static_cast<size_t>(expect + 4.0 * std::sqrt(expect)) + 16;
    std::vector<uint32_t>& cand = s->cand;
    std::vector<uint32_t>& ckeys = s->ckeys;  // key of each candidate, collected alongside
    size_t c = 0;
    for (;;) {
      uint32_t t = 0;  // 0: every index is a candidate
      if (rank < ns) {  // the sample's rank-th largest key (0-based)
        std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(rank), sample.end(),
                         std::greater<uint32_t>());
        t = sample[rank];
      }
      c = 0;
      if (cand.size() < 2 * k + 4096) cand.resize(2 * k + 4096);
      if (ckeys.size() < cand.size()) ckeys.resize(cand.size());
      constexpr size_t kBlock = 4096;
      for (size_t b = 0; b < len; b += kBlock) {
        const size_t e = std::min(len, b + kBlock);
        if (c + (e - b) > cand.size()) {
          cand.resize(std::max(cand.size() * 2, c + (e - b)));
          ckeys.resize(cand.size());
        }
        if (sum) {
          bool bad = false;
          c = CollectSum(sum->a, sum->b, sum->x, b, e, t, mask, cand.data(), ckeys.data(), c, &bad);
          if (bad) return false;
        } else {
          c = Collect(v, b, e, t, mask, cand.data(), ckeys.data(), c);
        }
      }
      sum = nullptr;  // v is whole now
      if (c >= k || t == 0) break;
      rank = 2 * rank + 16;
    }
    // The candidates hold every index with key >= t and at least k of them, so they contain
    // the top k.
    EmitCandidates(c, k, base, approx_, s, out);
    return true;
  }

  // Of the c candidates in s->cand (indices, ascending) with their keys in s->ckeys, which
  // contain the top k: appends base + index of the top k, in index order.
  static void EmitCandidates(size_t c, size_t k, uint32_t base, bool histogram, Scratch* s, std::vector<uint32_t>* out) {
    s->keys.assign(s->ckeys.begin(), s->ckeys.begin() + static_cast<std::ptrdiff_t>(c));
    const uint32_t t = KthLargest(s->keys, k, histogram);
    const size_t start = out->size();
    out->resize(start + c);
    out->resize(start + EmitTopK(s->cand.data(), s->ckeys.data(), c, k, t, base, out->data() + start));
  }

  // Small ranges with k <= 64 (DeMo's top-k of each chunk): a lower bound on the k-th key
  // first. Slot j (j < S, S = k rounded up to a multiple of 8, 2S <= len) keeps the largest key
  // among positions j, j + S, j + 2S, ...: S distinct values are >= L, the smallest slot
  // maximum, so the k-th largest key is >= L and the top k are among the candidates with
  // key >= L, typically a few more than k. Exact from there on, as SelectLarge.
  void SelectSmall(const float* v, size_t len, uint32_t base, size_t k, size_t slots, uint32_t mask, Scratch* s,
                   std::vector<uint32_t>* out) const {
#if SHOAL_HAVE_AVX2_BODIES
    if (slots == 8 && simd::Active() == simd::Level::kAvx2) {
      if (s->cand.size() < len + 8) {
        s->cand.resize(len + 8);
        s->ckeys.resize(len + 8);
      }
      const size_t start = out->size();
      out->resize(start + k);
      if (SmallTopKAvx2(v, len, base, k, mask, s->cand.data(), s->ckeys.data(), out->data() + start)) return;
      out->resize(start);
    }
#endif
    uint32_t M[64];
    SHOAL_SIMD_CALL(SlotMax, v, len, slots, mask, M);
    const uint32_t low = *std::min_element(M, M + slots);
    if (s->cand.size() < len) {
      s->cand.resize(len);
      s->ckeys.resize(len);
    }
    const size_t c = Collect(v, 0, len, low, mask, s->cand.data(), s->ckeys.data(), 0);
    EmitCandidates(c, k, base, false, s, out);
  }

  double ratio_;
  size_t k_;  // 0: use ratio_
  bool approx_;
};

constexpr ParamDecl kParams[] = {
    RatioParam("ratio", 0.01, "share of the values kept (per tensor, or per chunk of a chunking transform)", "k"),
    OptionalIntParam("k", 1, INT32_MAX, "values kept per tensor or chunk, instead of a ratio"),
    BoolParam("approx", false, "1: rank by the top 16 bits of |v| (faster; within a factor 1 + 2^-7)"),
};

StatusOr<std::unique_ptr<Selector>> Build(const StageParams& p, const std::vector<TensorSpec>&) {
  return std::unique_ptr<Selector>(
      std::make_unique<TopK>(p.Double("ratio"), static_cast<size_t>(p.Int("k")), p.Int("approx") != 0));
}

}  // namespace

constinit const StageDecl kTopKStage = {
    .name = "topk", .id = StageId::kTopK, .slot = Slot::kSelect,
    .summary = "the largest magnitudes",
    .params = kParams, .factory = &Build};

}  // namespace shoal::codec
