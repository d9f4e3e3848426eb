// Random-k (stage "randk", StageId::kRandK): a uniformly random subset of Count(n, chunk)
// coordinates drawn from the round's shared seed, so every client of a round picks the same
// coordinates and the decoder regenerates them (indices are not sent).
//
// Stream: Rng(ctx.shared_seed, (ctx.round << 20) ^ tensor_index). Per tensor (chunk == 0) one
// subset of the whole tensor; per chunk one subset per chunk, chunks in order from the same
// stream. Each subset is drawn with Floyd's algorithm (m draws of Rng::Below, every m-subset
// equally likely) over a bitmap, then read out in ascending order.
#include <algorithm>
#include <bit>

#include "codec/stages.h"
#include "codec/xform_params.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

// Appends base + a uniform random m-subset of [0, len), ascending. bits is scratch.
void FloydSubset(Rng& rng, size_t len, size_t m, uint32_t base, std::vector<uint64_t>& bits,
                 std::vector<uint32_t>* out) {
  if (m >= len) {
    for (size_t i = 0; i < len; ++i) out->push_back(base + static_cast<uint32_t>(i));
    return;
  }
  const size_t words = (len + 63) / 64;
  bits.assign(words, 0);
  for (size_t j = len - m; j < len; ++j) {
    size_t t = static_cast<size_t>(rng.Below(j + 1));
    if (bits[t >> 6] >> (t & 63) & 1) t = j;
    bits[t >> 6] |= uint64_t{1} << (t & 63);
  }
  for (size_t w = 0; w < words; ++w) {
    uint64_t x = bits[w];
    while (x) {
      out->push_back(base + static_cast<uint32_t>(w * 64 + static_cast<size_t>(std::countr_zero(x))));
      x &= x - 1;
    }
  }
}

class RandK final : public Selector {
 public:
  explicit RandK(double ratio) : ratio_(ratio) {}

  StageId id() const override { return StageId::kRandK; }
  bool implicit_indices() const override { return true; }

  size_t Count(size_t n, size_t chunk) const override { return detail::CountChunked(n, chunk, ratio_, 0); }

  void Select(std::span<const float> values, size_t chunk, const RoundContext& ctx, size_t tensor_index,
              std::vector<uint32_t>* indices) const override {
    indices->clear();
    const size_t n = values.size();
    if (n == 0) return;
    indices->reserve(Count(n, chunk));
    Rng rng(ctx.shared_seed, (ctx.round << 20) ^ static_cast<uint64_t>(tensor_index));
    std::vector<uint64_t> bits;
    if (chunk == 0 || chunk >= n) {
      FloydSubset(rng, n, detail::CountFor(n, ratio_, 0), 0, bits, indices);
      return;
    }
    for (size_t b = 0; b < n; b += chunk) {
      const size_t len = std::min(chunk, n - b);
      FloydSubset(rng, len, detail::CountFor(len, ratio_, 0), static_cast<uint32_t>(b), bits, indices);
    }
  }

 private:
  double ratio_;
};

constexpr ParamDecl kParams[] = {
    RatioParam("ratio", 0.01, "share of the coordinates kept (per tensor, or per chunk of a chunking transform)"),
};

StatusOr<std::unique_ptr<Selector>> Build(const StageParams& p, const std::vector<TensorSpec>&) {
  return std::unique_ptr<Selector>(std::make_unique<RandK>(p.Double("ratio")));
}

}  // namespace

constinit const StageDecl kRandKStage = {
    .name = "randk", .id = StageId::kRandK, .slot = Slot::kSelect,
    .summary = "random coordinates from the round's shared seed (indices not sent)",
    .params = kParams, .factory = &Build};

}  // namespace shoal::codec
