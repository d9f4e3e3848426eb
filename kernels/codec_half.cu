// bf16 and fp16 wire values (stages "bf16" and "fp16"): the host stages' bit manipulations,
// including fp16's exact subnormal rounding trick, so encode and decode match bit for bit.
#include "codec_common.cuh"
#include "codec_kernels.h"

namespace shoal::cuda {
namespace {

__device__ inline uint16_t FloatToBf16(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
  uint32_t r = (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;
  r = r >= 0x7f80u ? 0x7f7fu : r;
  r = a > 0x7f800000u ? 0u : r;
  return static_cast<uint16_t>(r | (sign >> 16));
}

__device__ inline uint16_t FloatToHalf(float x) {
  uint32_t f = __float_as_uint(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  uint32_t h;
  if (f >= 0x47800000u) {
    h = f > 0x7f800000u ? 0 : 0x7bffu;
  } else if (f < 0x38800000u) {
    const float v = __fadd_rn(__uint_as_float(f), 0.5f);
    h = __float_as_uint(v) - 0x3f000000u;
  } else {
    const uint32_t odd = (f >> 13) & 1u;
    f += 0xc8000fffu + odd;
    h = f >> 13;
    if (h >= 0x7c00u) h = 0x7bffu;
  }
  return static_cast<uint16_t>(h | sign);
}

__device__ inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) return __uint_as_float(__float_as_uint(__fmul_rn(static_cast<float>(m), 5.9604644775390625e-8f)) | sign);
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

__global__ void EncBf16(size_t n, const float* x, uint16_t* out) { SHOAL_GRID_LOOP(i, n) out[i] = FloatToBf16(x[i]); }
__global__ void DecBf16(size_t n, const uint16_t* in, float* y) {
  SHOAL_GRID_LOOP(i, n) y[i] = __uint_as_float(static_cast<uint32_t>(in[i]) << 16);
}
__global__ void EncFp16(size_t n, const float* x, uint16_t* out) { SHOAL_GRID_LOOP(i, n) out[i] = FloatToHalf(x[i]); }
__global__ void DecFp16(size_t n, const uint16_t* in, float* y) { SHOAL_GRID_LOOP(i, n) y[i] = HalfToFloat(in[i]); }

}  // namespace

void EncodeBf16(Backend& b, size_t n, const float* x, uint16_t* out) {
  if (n == 0) return;
  EncBf16<<<GridFor(n), 256, 0, StreamFor(b)>>>(n, x, out);
  SHOAL_CUDA_LAUNCHED();
}
void DecodeBf16(Backend& b, size_t n, const uint16_t* in, float* y) {
  if (n == 0) return;
  DecBf16<<<GridFor(n), 256, 0, StreamFor(b)>>>(n, in, y);
  SHOAL_CUDA_LAUNCHED();
}
void EncodeFp16(Backend& b, size_t n, const float* x, uint16_t* out) {
  if (n == 0) return;
  EncFp16<<<GridFor(n), 256, 0, StreamFor(b)>>>(n, x, out);
  SHOAL_CUDA_LAUNCHED();
}
void DecodeFp16(Backend& b, size_t n, const uint16_t* in, float* y) {
  if (n == 0) return;
  DecFp16<<<GridFor(n), 256, 0, StreamFor(b)>>>(n, in, y);
  SHOAL_CUDA_LAUNCHED();
}

}  // namespace shoal::cuda
