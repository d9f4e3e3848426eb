// fp16 quantizer: IEEE binary16, round to nearest even, hand-written bit conversions (no
// compiler or F16C intrinsics, so every platform produces the same bits). Finite inputs beyond
// +-65504 saturate to +-65504 (NaN maps to 0); subnormal halves are produced and decoded
// exactly. Decode refuses Inf/NaN encodings. Wire: n x uint16 little-endian.
#include <bit>
#include <cstring>

#include "codec/bytes.h"
#include "codec/kernels.h"
#include "codec/simd.h"
#include "codec/stages.h"

namespace shoal::codec {
namespace {

// Branch-free (all three cases computed, one chosen), so that it vectorizes; the unchosen
// cases' arithmetic cannot trap (no FP exceptions are enabled) and never reaches the result.
[[gnu::always_inline]] inline uint16_t FloatToHalf(float x) {
  uint32_t f = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  // >= 65536, Inf or NaN: NaN -> 0, else saturate.
  const uint32_t huge = f > 0x7f800000u ? 0u : 0x7bffu;
  // < 2^-14, a subnormal half or zero: adding 0.5 aligns the value so that the float adder's
  // own round-to-nearest-even rounds at the half-subnormal step 2^-24; the low mantissa bits
  // are the result.
  const uint32_t tiny = std::bit_cast<uint32_t>(std::bit_cast<float>(f) + 0.5f) - 0x3f000000u;
  // Normal: rebias the exponent (-112 << 23) and round half to even; past 65504: saturate.
  uint32_t normal = (f + 0xc8000fffu + ((f >> 13) & 1u)) >> 13;
  normal = normal >= 0x7c00u ? 0x7bffu : normal;
  const uint32_t h = f >= 0x47800000u ? huge : (f < 0x38800000u ? tiny : normal);
  return static_cast<uint16_t>(h | sign);
}

[[gnu::always_inline]] inline uint32_t HalfToFloatBits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  // Subnormal or zero: m * 2^-24 is exact in float.
  const uint32_t sub = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(m)) * 5.9604644775390625e-8f) | sign;
  const uint32_t normal = sign | ((e + 112u) << 23) | (m << 13);
  return e == 0 ? sub : normal;
}

// Encode and decode loops, compiled at each SIMD level (simd.h); the same operations, so the
// same bits. Encode returns false when some input is not finite; decode when some half is
// Inf or NaN.
[[gnu::always_inline]] inline bool EncodeBody(const float* x, size_t n, uint8_t* p) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(x[i]);
    bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
    const uint16_t h = FloatToHalf(x[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
  return bad == 0;
}
[[gnu::always_inline]] inline bool DecodeBody(const uint8_t* b, size_t n, float* out) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, b + 2 * i, 2);
    bad |= static_cast<uint32_t>(((h >> 10) & 0x1fu) == 0x1fu);
    const uint32_t f = HalfToFloatBits(h);
    std::memcpy(out + i, &f, 4);
  }
  return bad == 0;
}
SHOAL_SIMD_CLONES(bool, Encode, (const float* x, size_t n, uint8_t* p), (x, n, p))
SHOAL_SIMD_CLONES(bool, Decode, (const uint8_t* b, size_t n, float* out), (b, n, out))

class Fp16 final : public Quantizer {
 public:
  StageId id() const override { return StageId::kFp16; }
  size_t MaxEncodedBytes(size_t n) const override { return 2 * n; }

  Status Encode(std::span<const float> values, const RoundContext&, size_t, ByteWriter* out) const override {
    const bool finite = SHOAL_SIMD_CALL(Encode, values.data(), values.size(), out->Extend(values.size() * 2));
    return finite ? Status::Ok() : NotFinite(kernels::FirstNonFinite(values));
  }

  Status Decode(ByteReader* in, std::span<float> values) const override {
    std::span<const uint8_t> b;
    SHOAL_RETURN_IF_ERROR(in->ReadBytes(values.size() * 2, &b, "fp16 values"));
    if (!SHOAL_SIMD_CALL(Decode, b.data(), values.size(), values.data()))
      return Status::Corruption("fp16 payload holds an Inf or NaN value");
    return Status::Ok();
  }
};

}  // namespace

constinit const StageDecl kFp16Stage = {
    .name = "fp16", .id = StageId::kFp16, .slot = Slot::kQuantize,
    .summary = "IEEE half precision, round to nearest even",
    .params = {}, .factory = &BuildPlain<Quantizer, Fp16>};

}  // namespace shoal::codec
