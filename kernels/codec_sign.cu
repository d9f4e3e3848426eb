// sign (stage "sign"): the host's bit layout (LSB first, 1 = sign bit) and decode (+-scale as
// bits); the scale is mean |x| summed in double here, in a different order from the host's.
#include <cfloat>

#include "codec_common.cuh"
#include "codec_kernels.h"
#include "reduce.cuh"

namespace shoal::cuda {
namespace {

__global__ void SignBits(size_t n, const float* x, uint8_t* bits) {
  const size_t nbytes = (n + 7) / 8;
  SHOAL_GRID_LOOP(b, nbytes) {
    uint32_t acc = 0;
    for (int j = 0; j < 8; ++j) {
      const size_t i = 8 * b + j;
      if (i < n) acc |= (__float_as_uint(x[i]) >> 31) << j;
    }
    bits[b] = static_cast<uint8_t>(acc);
  }
}

__global__ void AbsSumPartials(size_t n, const float* x, double* partials) {
  double s = 0.0;
  SHOAL_GRID_LOOP(i, n) s += fabsf(x[i]);
  s = BlockSum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void MeanScale(const double* partials, int count, size_t n, float* scale) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = BlockSum(s);
  if (threadIdx.x == 0) *scale = n ? static_cast<float>(fmin(s / static_cast<double>(n), static_cast<double>(FLT_MAX))) : 0.0f;
}

__global__ void SignDecode(size_t n, const uint8_t* bits, const float* scale, float* y) {
  const uint32_t pos = __float_as_uint(*scale);
  SHOAL_GRID_LOOP(i, n) y[i] = __uint_as_float(pos | (((static_cast<uint32_t>(bits[i / 8]) >> (i % 8)) & 1u) << 31));
}

}  // namespace

void QuantizeSign(Backend& backend, size_t n, const float* x, uint8_t* bits, float* scale) {
  const cudaStream_t s = StreamFor(backend);
  if (n > 0) {
    SignBits<<<GridFor((n + 7) / 8), 256, 0, s>>>(n, x, bits);
    SHOAL_CUDA_LAUNCHED();
  }
  TempBuffer partials(backend, sizeof(double) * kReduceBlocks);
  AbsSumPartials<<<kReduceBlocks, 256, 0, s>>>(n, x, partials.as<double>());
  SHOAL_CUDA_LAUNCHED();
  MeanScale<<<1, 256, 0, s>>>(partials.as<double>(), kReduceBlocks, n, scale);
  SHOAL_CUDA_LAUNCHED();
}

void DequantizeSign(Backend& backend, size_t n, const uint8_t* bits, const float* scale, float* y) {
  if (n == 0) return;
  SignDecode<<<GridFor(n), 256, 0, StreamFor(backend)>>>(n, bits, scale, y);
  SHOAL_CUDA_LAUNCHED();
}

}  // namespace shoal::cuda
