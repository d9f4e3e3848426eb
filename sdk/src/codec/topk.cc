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
// sample threshold is lowered and the pass repeated). Small ranges use a heap (small k) or
// nth_element.
//
// Approximate mode (approx=1) ranks by the magnitude truncated to its top 16 bits (bf16
// truncation: exponent and 7 mantissa bits), ties by the lower index, and returns exactly
// Count values. Bound: every selected |v| >= trunc16(m_k) >= m_k * (1 - 2^-7) for normal
// floats, where m_k is the exact k-th largest |v|; equivalently every unselected value is
// below every selected one by at most a factor (1 + 2^-7). Its k-th key comes from a histogram
// of the candidates instead of nth_element.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "codec/stages.h"
#include "codec/xform_params.h"
#include "core/rng.h"

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

// The k-th largest (1 <= k <= keys.size()) of keys; reorders keys.
uint32_t KthLargest(std::vector<uint32_t>& keys, size_t k, bool histogram) {
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
    Scratch s;
    if (chunk == 0 || chunk >= n) {
      SelectRange(values.data(), n, 0, detail::CountFor(n, ratio_, k_), &s, indices);
      return;
    }
    for (size_t b = 0; b < n; b += chunk) {
      const size_t len = std::min(chunk, n - b);
      SelectRange(values.data() + b, len, static_cast<uint32_t>(b), detail::CountFor(len, ratio_, k_), &s, indices);
    }
  }

 private:
  struct Scratch {
    std::vector<uint32_t> keys, cand, ckeys;
  };

  void SelectRange(const float* v, size_t len, uint32_t base, size_t k, Scratch* s, std::vector<uint32_t>* out) const {
    const uint32_t mask = approx_ ? kApproxMask : kExactMask;
    if (k >= len) {
      for (size_t i = 0; i < len; ++i) out->push_back(base + static_cast<uint32_t>(i));
      return;
    }
    if (len >= (size_t{1} << 18) && k <= len / 4) {
      SelectLarge(v, len, base, k, mask, s, out);
      return;
    }
    uint32_t t;
    if (k <= 64 && len >= 4 * k) {
      // Min-heap of the k largest keys seen so far; its top ends as the k-th largest.
      std::vector<uint32_t>& heap = s->keys;
      heap.resize(k);
      for (size_t i = 0; i < k; ++i) heap[i] = Key(v[i], mask);
      std::make_heap(heap.begin(), heap.end(), std::greater<uint32_t>());
      for (size_t i = k; i < len; ++i) {
        const uint32_t key = Key(v[i], mask);
        if (key > heap.front()) {
          std::pop_heap(heap.begin(), heap.end(), std::greater<uint32_t>());
          heap.back() = key;
          std::push_heap(heap.begin(), heap.end(), std::greater<uint32_t>());
        }
      }
      t = heap.front();
    } else {
      s->keys.resize(len);
      for (size_t i = 0; i < len; ++i) s->keys[i] = Key(v[i], mask);
      t = KthLargest(s->keys, k, false);
    }
    EmitRange(v, len, base, k, t, mask, out);
  }

  // Sampled threshold, one collection pass, exact k-th key among the candidates.
  void SelectLarge(const float* v, size_t len, uint32_t base, size_t k, uint32_t mask, Scratch* s,
                   std::vector<uint32_t>* out) const {
    const size_t ns = std::min<size_t>(size_t{1} << 16, len / 16);
    const size_t stride = len / ns;
    std::vector<uint32_t> sample(ns);
    Rng rng(0x746f706b /* "topk" */, len);
    for (size_t i = 0; i < ns; ++i) sample[i] = Key(v[i * stride + rng.Below(stride)], mask);
    std::sort(sample.begin(), sample.end(), std::greater<uint32_t>());
    const double expect = static_cast<double>(k) * static_cast<double>(ns) / static_cast<double>(len);
    size_t rank = static_cast<size_t>(expect + 4.0 * std::sqrt(expect)) + 16;
    std::vector<uint32_t>& cand = s->cand;
    std::vector<uint32_t>& ckeys = s->ckeys;  // key of each candidate, collected alongside
    size_t c = 0;
    for (;;) {
      const uint32_t t = rank < ns ? sample[rank] : 0;  // 0: every index is a candidate
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
        uint32_t* o = cand.data();
        uint32_t* ok = ckeys.data();
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
      }
      if (c >= k || t == 0) break;
      rank = 2 * rank + 16;
    }
    // The candidates hold every index with key >= t and at least k of them, so they contain
    // the top k. Find the k-th key among them, then emit in index order.
    std::vector<uint32_t>& keys = s->keys;
    keys.assign(ckeys.begin(), ckeys.begin() + static_cast<std::ptrdiff_t>(c));
    const uint32_t t = KthLargest(keys, k, approx_);
    size_t above = 0;
    for (size_t j = 0; j < c; ++j) above += ckeys[j] > t;
    size_t eq = k - above;
    const size_t start = out->size();
    out->resize(start + c);
    uint32_t* o = out->data() + start;
    size_t m = 0;
    for (size_t j = 0; j < c; ++j) {
      const uint32_t key = ckeys[j];
      const size_t take_eq = (key == t) & (eq > 0);
      o[m] = base + cand[j];
      m += (key > t) | take_eq;
      eq -= take_eq;
    }
    out->resize(start + m);
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
