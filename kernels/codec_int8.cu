// int8 (stage "int8", deterministic): one block per chunk; the same float operations as
// int8.cc, so the bytes match the host encoder and the decode matches bit for bit.
#include <algorithm>
#include <cfloat>

#include "codec_common.cuh"
#include "codec_kernels.h"

namespace shoal::cuda {
namespace {

__device__ inline int8_t RoundClamp(float v) {
  float r = rintf(v);  // half to even, as (v + 1.5*2^23) - 1.5*2^23 on the host for |v| < 2^22
  r = fminf(fmaxf(r, -127.0f), 127.0f);
  return static_cast<int8_t>(static_cast<int>(r));
}

__global__ void Quantize(size_t n, size_t chunk, const float* x, float* scales, int8_t* q) {
  __shared__ uint32_t warp_max[32];
  const size_t nchunks = (n + chunk - 1) / chunk;
  for (size_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const size_t begin = c * chunk, len = min(chunk, n - begin);
    // absmax as float bits (non-negative float order = integer order), clamped to FLT_MAX.
    uint32_t m = 0;
    for (size_t i = threadIdx.x; i < len; i += blockDim.x) m = max(m, __float_as_uint(x[begin + i]) & 0x7fffffffu);
    for (int off = 16; off > 0; off /= 2) m = max(m, __shfl_down_sync(0xffffffffu, m, off));
    __syncthreads();
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    uint32_t bits = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) bits = max(bits, warp_max[w]);
    bits = min(bits, 0x7f7fffffu);
    const float amax = __uint_as_float(bits);
    const float scale = amax / 127.0f;
    if (threadIdx.x == 0) scales[c] = scale;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const bool tiny = !(inv <= FLT_MAX) || (scale == 0.0f && amax > 0.0f);  // subnormal absmax
    for (size_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float v = x[begin + i];
      q[begin + i] = tiny ? (scale > 0.0f ? RoundClamp(v / scale) : int8_t{0}) : RoundClamp(v * inv);
    }
  }
}

__global__ void Dequantize(size_t n, size_t chunk, const float* scales, const int8_t* q, float* y) {
  SHOAL_GRID_LOOP(i, n) y[i] = static_cast<float>(q[i]) * scales[i / chunk];
}

}  // namespace

void QuantizeInt8(Backend& backend, size_t n, size_t chunk, const float* x, float* scales, int8_t* q) {
  if (n == 0 || chunk == 0) return;
  const size_t nchunks = (n + chunk - 1) / chunk;
  const unsigned threads = chunk >= 256 ? 256 : 32 * static_cast<unsigned>((chunk + 31) / 32);
  Quantize<<<static_cast<unsigned>(std::min<size_t>(nchunks, 65535 * 8)), threads, 0, StreamFor(backend)>>>(
      n, chunk, x, scales, q);
  SHOAL_CUDA_LAUNCHED();
}

void DequantizeInt8(Backend& backend, size_t n, size_t chunk, const float* scales, const int8_t* q, float* y) {
  if (n == 0 || chunk == 0) return;
  Dequantize<<<GridFor(n), 256, 0, StreamFor(backend)>>>(n, chunk, scales, q, y);
  SHOAL_CUDA_LAUNCHED();
}

}  // namespace shoal::cuda
