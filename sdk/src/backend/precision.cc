#include "backend/precision.h"

#include <cmath>

namespace shoal {

StatusOr<Precision> ParsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "tf32") return Precision::kTf32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  return Status::InvalidArgument("unknown --precision '" + name + "': expected fp32, tf32, bf16 or fp16");
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

float RoundToFp16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return x;  // NaN
  const float mag = std::bit_cast<float>(a);
  // 65520 = 65504 + half an ulp: from there on, round to nearest gives Inf.
  if (mag >= 65520.0f) return std::bit_cast<float>(sign | 0x7f800000u);
  float r;
  if (mag < 6.103515625e-05f) {
    // Half subnormals are multiples of 2^-24: round to that grid (nearbyint is half to even).
    r = std::nearbyint(mag * 16777216.0f) / 16777216.0f;
  } else {
    // Normal halves keep 10 of float's 23 mantissa bits: round half to even at bit 13.
    r = std::bit_cast<float>((a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u);
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(r) | sign);
}

void RoundTo(Precision p, float* x, size_t n) {
  switch (p) {
    case Precision::kFp32: return;
    case Precision::kTf32:
      for (size_t i = 0; i < n; ++i) x[i] = RoundToTf32(x[i]);
      return;
    case Precision::kBf16:
      for (size_t i = 0; i < n; ++i) x[i] = RoundToBf16(x[i]);
      return;
    case Precision::kFp16:
      for (size_t i = 0; i < n; ++i) x[i] = RoundToFp16(x[i]);
      return;
  }
}

}  // namespace shoal
