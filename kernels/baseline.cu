#include <cublas_v2.h>

#include <algorithm>
#include <chrono>

#include "baseline.h"
#include "codec_common.cuh"

namespace shoal::cuda {
namespace {

template <typename F>
double BestSeconds(cudaStream_t s, int reps, F&& f) {
  f();  // warm-up
  SHOAL_CUDA_CHECK(cudaStreamSynchronize(s));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(s));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

double PlainSgemmSeconds(Backend& backend, int m, int n, int k, int reps) {
  const cudaStream_t s = StreamFor(backend);
  TempBuffer a(backend, sizeof(float) * m * k), b(backend, sizeof(float) * k * n), c(backend, sizeof(float) * m * n);
  SHOAL_CUDA_CHECK(cudaMemsetAsync(a.as<void>(), 0, sizeof(float) * m * k, s));
  SHOAL_CUDA_CHECK(cudaMemsetAsync(b.as<void>(), 0, sizeof(float) * k * n, s));
  cublasHandle_t h;
  SHOAL_CUDA_CHECK(cublasCreate(&h));
  SHOAL_CUDA_CHECK(cublasSetStream(h, s));
  const float one = 1.0f, zero = 0.0f;
  const double t = BestSeconds(s, reps, [&] {
    SHOAL_CUDA_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b.as<float>(), n, a.as<float>(), k, &zero,
                                 c.as<float>(), n));
  });
  cublasDestroy(h);
  return t;
}

double DeviceMemcpyGBps(Backend& backend, size_t bytes, int reps) {
  const cudaStream_t s = StreamFor(backend);
  TempBuffer src(backend, bytes), dst(backend, bytes);
  SHOAL_CUDA_CHECK(cudaMemsetAsync(src.as<void>(), 1, bytes, s));
  const double t = BestSeconds(s, reps, [&] {
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(dst.as<void>(), src.as<void>(), bytes, cudaMemcpyDeviceToDevice, s));
  });
  return static_cast<double>(bytes) / t / 1e9;
}

}  // namespace shoal::cuda
