// QSGD (stage "qsgd"): norm, then unbiased levels. The host draws its uniforms from one
// sequential xoshiro stream per tensor; a GPU cannot, so here u_i comes from a counter-based
// generator (SplitMix64 of seed and index): a different, equally valid unbiased encoding.
// Decode follows qsgd.cc exactly (float step = norm / levels, value = level * step).
#include <cfloat>

#include "codec_common.cuh"
#include "codec_kernels.h"
#include "reduce.cuh"

namespace shoal::cuda {
namespace {

__device__ inline uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// norm = min(sqrt(sum of squares), FLT_MAX / 2) as a float, as qsgd.cc.
__global__ void NormFromSquares(const double* sum, float* norm) {
  *norm = static_cast<float>(fmin(sqrt(*sum), static_cast<double>(FLT_MAX / 2)));
}

__global__ void Levels(size_t n, uint32_t levels, const float* x, uint64_t seed, const float* norm, uint32_t* codes) {
  const float nv = *norm;
  const double k = nv > 0.0f ? static_cast<double>(levels) / static_cast<double>(nv) : 0.0;
  SHOAL_GRID_LOOP(i, n) {
    uint32_t code = 0;
    if (nv > 0.0f) {
      const double r = fabs(static_cast<double>(x[i])) * k;
      double level = floor(r);
      const double u = static_cast<double>(SplitMix64(seed ^ (i * 0xd1b54a32d192ed03ULL)) >> 11) * 0x1.0p-53;
      if (u < r - level) level += 1.0;
      const uint32_t l = static_cast<uint32_t>(fmin(level, static_cast<double>(levels)));
      code = (l << 1) | (__float_as_uint(x[i]) >> 31);
    }
    codes[i] = code;
  }
}

__global__ void Decode(size_t n, uint32_t levels, const uint32_t* codes, const float* norm, float* y) {
  const float step = __fdiv_rn(*norm, static_cast<float>(levels));
  SHOAL_GRID_LOOP(i, n) {
    const float v = __fmul_rn(static_cast<float>(codes[i] >> 1), step);
    y[i] = (codes[i] & 1u) ? -v : v;
  }
}

}  // namespace

void QuantizeQsgd(Backend& backend, size_t n, uint32_t levels, const float* x, uint64_t seed, uint32_t* codes,
                  float* norm) {
  const cudaStream_t s = StreamFor(backend);
  TempBuffer partials(backend, sizeof(double) * (kReduceBlocks + 1));
  double* sum = partials.as<double>() + kReduceBlocks;
  LaunchSumSquares(s, n, x, partials.as<double>(), sum);
  NormFromSquares<<<1, 1, 0, s>>>(sum, norm);
  SHOAL_CUDA_LAUNCHED();
  if (n == 0) return;
  Levels<<<GridFor(n), 256, 0, s>>>(n, levels, x, seed, norm, codes);
  SHOAL_CUDA_LAUNCHED();
}

void DequantizeQsgd(Backend& backend, size_t n, uint32_t levels, const uint32_t* codes, const float* norm, float* y) {
  if (n == 0) return;
  Decode<<<GridFor(n), 256, 0, StreamFor(backend)>>>(n, levels, codes, norm, y);
  SHOAL_CUDA_LAUNCHED();
}

}  // namespace shoal::cuda
