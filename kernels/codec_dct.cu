// Chunked orthonormal DCT-II (stage "dct"), one thread block per chunk, as dct.cc's
// ChunkProduct: out = L * src * Rt with z = src * Rt first (z[u][c] = sum over v in order of
// src[u][v] * Rt[v][c]), then out[u'][c] = sum over u in order of L[u'][u] * z[u][c]. Every
// product and sum is one IEEE operation in the host's order (the host skips zero terms, which
// never changes a bit), so the inverse, which decoders run, matches the host bit for bit.
// Forward uses L = D_R, Rt = D_C^T; inverse L = D_R^T, Rt = D_C. The DCT matrices are the
// host's (codec::detail::DctMatrix), uploaded once per size.
#include <algorithm>
#include <vector>

#include "codec/xform_params.h"
#include "codec_common.cuh"
#include "codec_kernels.h"

namespace shoal::cuda {
namespace {

constexpr int kMaxSide = 64;

__global__ void ChunkProduct(int64_t rows, int64_t cols, int R, int C, const float* L, const float* Rt,
                             const float* src, bool src_chunk_major, float* dst, bool dst_chunk_major) {
  __shared__ float tile[kMaxSide * kMaxSide];
  __shared__ float z[kMaxSide * kMaxSide];
  const int64_t nbc = cols / C;
  const int64_t chunks = (rows / R) * nbc;
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const int64_t bi = chunk / nbc, bj = chunk % nbc;
    // Element (u, v) of this chunk in a row-major tensor, or in the chunk-major coefficients.
    auto at = [&](bool chunk_major, int u, int v) -> int64_t {
      return chunk_major ? chunk * R * C + u * C + v : (bi * R + u) * cols + bj * C + v;
    };
    for (int e = threadIdx.x; e < R * C; e += blockDim.x) tile[e] = src[at(src_chunk_major, e / C, e % C)];
    __syncthreads();
    for (int e = threadIdx.x; e < R * C; e += blockDim.x) {
      const int u = e / C, c = e % C;
      float acc = 0.0f;
      for (int v = 0; v < C; ++v) acc = __fadd_rn(acc, __fmul_rn(tile[u * C + v], Rt[v * C + c]));
      z[e] = acc;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < R * C; e += blockDim.x) {
      const int up = e / C, c = e % C;
      float acc = 0.0f;
      for (int u = 0; u < R; ++u) acc = __fadd_rn(acc, __fmul_rn(L[up * R + u], z[u * C + c]));
      dst[at(dst_chunk_major, up, c)] = acc;
    }
    __syncthreads();
  }
}

// D_n and D_n^T (the host's matrices) in device memory for the duration of one call.
class DeviceDct {
 public:
  DeviceDct(Backend& backend, int64_t n) : d_(backend, Bytes(n)), dt_(backend, Bytes(n)) {
    const std::vector<float>& m = codec::detail::DctMatrix(n);
    std::vector<float> t(m.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) t[static_cast<size_t>(j * n + i)] = m[static_cast<size_t>(i * n + j)];
    backend.CopyToDevice(d_.as<void>(), m.data(), Bytes(n));
    backend.CopyToDevice(dt_.as<void>(), t.data(), Bytes(n));
  }
  const float* d() const { return d_.as<float>(); }
  const float* dt() const { return dt_.as<float>(); }

 private:
  static size_t Bytes(int64_t n) { return static_cast<size_t>(n * n) * sizeof(float); }
  TempBuffer d_, dt_;
};

void Run(Backend& backend, int64_t rows, int64_t cols, int64_t R, int64_t C, const float* L, const float* Rt,
         const float* src, bool src_chunk_major, float* dst, bool dst_chunk_major) {
  if (rows <= 0 || cols <= 0) return;
  if (R < 1 || C < 1 || R > kMaxSide || C > kMaxSide || rows % R != 0 || cols % C != 0)
    Fatal("DCT kernel", "chunk sides must divide the tensor and be at most 64", __FILE__, __LINE__);
  const int64_t chunks = (rows / R) * (cols / C);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(chunks, 65535 * 8));
  ChunkProduct<<<grid, 256, 0, StreamFor(backend)>>>(rows, cols, static_cast<int>(R), static_cast<int>(C), L, Rt, src,
                                                     src_chunk_major, dst, dst_chunk_major);
  SHOAL_CUDA_LAUNCHED();
}

}  // namespace

void DctForward(Backend& backend, int64_t rows, int64_t cols, int64_t R, int64_t C, const float* x, float* coeffs) {
  const DeviceDct dr(backend, R), dc(backend, C);
  Run(backend, rows, cols, R, C, dr.d(), dc.dt(), x, false, coeffs, true);
}

void DctInverse(Backend& backend, int64_t rows, int64_t cols, int64_t R, int64_t C, const float* coeffs, float* x) {
  const DeviceDct dr(backend, R), dc(backend, C);
  Run(backend, rows, cols, R, C, dr.dt(), dc.d(), coeffs, true, x, false);
}

}  // namespace shoal::cuda
