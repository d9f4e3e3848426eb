// Compute precisions for mixed-precision training (--precision) and the float rounding that
// defines them. A reduced-precision GEMM rounds its operands to the format (round to nearest
// even, IEEE overflow to Inf, NaN kept) and accumulates the products in fp32, which is what
// tensor cores do; the CPU backend emulates exactly that, so the same code path (and fp16's
// overflow, which dynamic loss scaling relies on) can be tested without a GPU.
#pragma once

#include <bit>
#include <cstdint>
#include <string>

#include "shoal/status.h"

namespace shoal {

enum class Precision {
  kFp32,  // plain fp32
  kTf32,  // operands rounded to TF32 (10-bit mantissa), fp32 accumulation
  kBf16,  // operands rounded to bfloat16 (7-bit mantissa, fp32 range), fp32 accumulation
  kFp16,  // operands rounded to IEEE half (10-bit mantissa, max 65504), fp32 accumulation
};

// "fp32" | "tf32" | "bf16" | "fp16".
StatusOr<Precision> ParsePrecision(const std::string& name);
const char* PrecisionName(Precision p);

// x rounded to bfloat16, returned as the float of the same value.
inline float RoundToBf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN stays NaN
  // Round half to even at bit 16; a carry into the exponent gives Inf past the largest bf16.
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return std::bit_cast<float>(r);
}

// x rounded to TF32 (sign, 8-bit exponent, 10-bit mantissa), as a float.
inline float RoundToTf32(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  const uint32_t r = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
  return std::bit_cast<float>(r);
}

// x rounded to IEEE binary16 (with subnormals; |x| >= 65520 becomes Inf), as a float.
float RoundToFp16(float x);

// Rounds x in place to `p` (no-op for fp32).
void RoundTo(Precision p, float* x, size_t n);

}  // namespace shoal
