// fp16 quantizer: IEEE binary16, round to nearest even, hand-written bit conversions (no
// compiler or F16C intrinsics, so every platform produces the same bits). Finite inputs beyond
// +-65504 saturate to +-65504 (NaN maps to 0); subnormal halves are produced and decoded
// exactly. Decode refuses Inf/NaN encodings. Wire: n x uint16 little-endian.
#include <bit>
#include <cstring>

#include "codec/bytes.h"
#include "codec/kernels.h"
#include "codec/stages.h"

namespace shoal::codec {
namespace {

inline uint16_t FloatToHalf(float x) {
  uint32_t f = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  uint32_t h;
  if (f >= 0x47800000u) {           // >= 65536, Inf or NaN
    h = f > 0x7f800000u ? 0 : 0x7bffu;  // NaN -> 0, else saturate
  } else if (f < 0x38800000u) {     // < 2^-14: subnormal half or zero
    // Adding 0.5 aligns the value so that the float adder's own round-to-nearest-even
    // rounds at the half-subnormal step 2^-24; the low mantissa bits are the result.
    float v = std::bit_cast<float>(f) + 0.5f;
    h = std::bit_cast<uint32_t>(v) - 0x3f000000u;
  } else {
    const uint32_t odd = (f >> 13) & 1u;
    f += 0xc8000fffu + odd;         // rebias exponent (-112 << 23) and round half to even
    h = f >> 13;
    if (h >= 0x7c00u) h = 0x7bffu;  // rounded up past 65504: saturate
  }
  return static_cast<uint16_t>(h | sign);
}

class Fp16 final : public Quantizer {
 public:
  StageId id() const override { return StageId::kFp16; }
  size_t MaxEncodedBytes(size_t n) const override { return 2 * n; }

  Status Encode(std::span<const float> values, const RoundContext&, size_t, ByteWriter* out) const override {
    if (const size_t bad = kernels::FirstNonFinite(values); bad != kernels::kAllFinite) return NotFinite(bad);
    uint8_t* p = out->Extend(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      uint16_t h = FloatToHalf(values[i]);
      std::memcpy(p + 2 * i, &h, 2);
    }
    return Status::Ok();
  }

  Status Decode(ByteReader* in, std::span<float> values) const override {
    std::span<const uint8_t> b;
    SHOAL_RETURN_IF_ERROR(in->ReadBytes(values.size() * 2, &b, "fp16 values"));
    uint32_t bad = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
      const uint32_t e = (h >> 10) & 0x1fu;
      const uint32_t m = h & 0x3ffu;
      bad |= (e == 0x1f);
      uint32_t f;
      if (e == 0) {
        // Subnormal or zero: m * 2^-24 is exact in float.
        f = std::bit_cast<uint32_t>(static_cast<float>(m) * 5.9604644775390625e-8f) | sign;
      } else {
        f = sign | ((e + 112u) << 23) | (m << 13);
      }
      values[i] = std::bit_cast<float>(f);
    }
    if (bad) return Status::Corruption("fp16 payload holds an Inf or NaN value");
    return Status::Ok();
  }
};

}  // namespace

constinit const StageDecl kFp16Stage = {
    .name = "fp16", .id = StageId::kFp16, .slot = Slot::kQuantize,
    .summary = "IEEE half precision, round to nearest even",
    .params = {}, .factory = &BuildPlain<Quantizer, Fp16>};

}  // namespace shoal::codec
