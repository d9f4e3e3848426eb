// bf16 quantizer: the top 16 bits of an fp32, round to nearest even. Finite inputs that would
// round past the largest bf16 (3.3895e38) saturate to it; NaN maps to 0. Decode refuses
// Inf/NaN encodings. Wire: n x uint16 little-endian.
#include <bit>
#include <cstring>

#include "codec/bytes.h"
#include "codec/kernels.h"
#include "codec/simd.h"
#include "codec/stages.h"

namespace shoal::codec {
namespace {

[[gnu::always_inline]] inline uint16_t FloatToBf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u & 0x7fffffffu;
  uint32_t r = (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;  // round half to even
  r = r >= 0x7f80u ? 0x7f7fu : r;                        // overflow: saturate
  r = a > 0x7f800000u ? 0u : r;                          // NaN -> 0
  return static_cast<uint16_t>(r | (sign >> 16));
}

// The conversion in one pass that also detects non-finite inputs (false when one is found);
// compiled at each SIMD level (simd.h), integer operations only, so the bits agree.
[[gnu::always_inline]] inline bool ConvertBody(const float* x, size_t n, uint8_t* __restrict p) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {  // one plain loop: the form the vectorizer takes
    const uint32_t u = std::bit_cast<uint32_t>(x[i]);
    bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
    const uint16_t h = FloatToBf16(x[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
  return bad == 0;
}
SHOAL_SIMD_CLONES(bool, Convert, (const float* x, size_t n, uint8_t* p), (x, n, p))

class Bf16 final : public Quantizer {
 public:
  StageId id() const override { return StageId::kBf16; }
  size_t MaxEncodedBytes(size_t n) const override { return 2 * n; }

  Status Encode(std::span<const float> values, const RoundContext&, size_t, ByteWriter* out) const override {
    const bool finite = SHOAL_SIMD_CALL(Convert, values.data(), values.size(), out->Extend(values.size() * 2));
    return finite ? Status::Ok() : NotFinite(kernels::FirstNonFinite(values));
  }

  Status Decode(ByteReader* in, std::span<float> values) const override {
    std::span<const uint8_t> b;
    SHOAL_RETURN_IF_ERROR(in->ReadBytes(values.size() * 2, &b, "bf16 values"));
    const size_t n = values.size();
    float* out = values.data();
    const uint8_t* src = b.data();
    uint32_t bad = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      uint16_t h[16];
      uint32_t f[16];
      std::memcpy(h, src + 2 * i, sizeof h);
      for (size_t j = 0; j < 16; ++j) {
        bad |= static_cast<uint32_t>((h[j] & 0x7f80u) == 0x7f80u);
        f[j] = static_cast<uint32_t>(h[j]) << 16;
      }
      std::memcpy(out + i, f, sizeof f);
    }
    for (; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      bad |= static_cast<uint32_t>((h & 0x7f80u) == 0x7f80u);
      uint32_t f = static_cast<uint32_t>(h) << 16;
      std::memcpy(out + i, &f, 4);
    }
    if (bad) return Status::Corruption("bf16 payload holds an Inf or NaN value");
    return Status::Ok();
  }
};

}  // namespace

constinit const StageDecl kBf16Stage = {
    .name = "bf16", .id = StageId::kBf16, .slot = Slot::kQuantize,
    .summary = "bfloat16, round to nearest even",
    .params = {}, .factory = &BuildPlain<Quantizer, Bf16>};

}  // namespace shoal::codec
