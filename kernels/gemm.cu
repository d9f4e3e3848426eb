#include "check.cuh"
#include "convert.cuh"
#include "gemm.cuh"

#include <algorithm>

namespace shoal::cuda {
namespace {

// The operands of a bf16/fp16 GEMM: na floats at a into a16 and nb at b into b16, in `p`'s
// format; returns cuBLAS's type for it.
cudaDataType_t ToHalfWidth(cudaStream_t s, Precision p, size_t na, const float* a, void* a16, size_t nb,
                           const float* b, void* b16) {
  if (p == Precision::kBf16) {
    LaunchToBf16(s, na, a, static_cast<__nv_bfloat16*>(a16));
    LaunchToBf16(s, nb, b, static_cast<__nv_bfloat16*>(b16));
    return CUDA_R_16BF;
  }
  LaunchToHalf(s, na, a, static_cast<__half*>(a16));
  LaunchToHalf(s, nb, b, static_cast<__half*>(b16));
  return CUDA_R_16F;
}

}  // namespace

void Gemm(cublasHandle_t h, cudaStream_t s, bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
          const float* b, float beta, float* c, Precision p, void* a16, void* b16) {
  if (m <= 0 || n <= 0) return;
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Leading dimensions as cblas's row-major ones; at least 1 even for k == 0 (C = beta C).
  const int lda = std::max(1, ta ? m : k), ldb = std::max(1, tb ? k : n);
  SHOAL_CUDA_CHECK(cublasSetStream(h, s));
  switch (p) {
    case Precision::kFp32:
      SHOAL_CUDA_CHECK(cublasSgemm(h, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, n));
      return;
    case Precision::kTf32:
      SHOAL_CUDA_CHECK(cublasGemmEx(h, op_b, op_a, n, m, k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c,
                                    CUDA_R_32F, n, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
      return;
    case Precision::kBf16:
    case Precision::kFp16: {
      const cudaDataType_t type = ToHalfWidth(s, p, static_cast<size_t>(m) * k, a, a16, static_cast<size_t>(k) * n, b, b16);
      SHOAL_CUDA_CHECK(cublasGemmEx(h, op_b, op_a, n, m, k, &alpha, b16, type, ldb, a16, type, lda, &beta, c,
                                    CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
    }
  }
}

void GemmStridedBatched(cublasHandle_t h, cudaStream_t s, bool ta, bool tb, int m, int n, int k, float alpha,
                        const float* a, int lda, long long stride_a, const float* b, int ldb, long long stride_b,
                        float beta, float* c, int ldc, long long stride_c, int batch, Precision p, void* a16,
                        void* b16) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  SHOAL_CUDA_CHECK(cublasSetStream(h, s));
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B first, m and n swapped.
  switch (p) {
    case Precision::kFp32:
      SHOAL_CUDA_CHECK(cublasSgemmStridedBatched(h, op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a, lda, stride_a,
                                                 &beta, c, ldc, stride_c, batch));
      return;
    case Precision::kTf32:
      SHOAL_CUDA_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, n, m, k, &alpha, b, CUDA_R_32F, ldb, stride_b, a,
                                                  CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c,
                                                  batch, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
      return;
    case Precision::kBf16:
    case Precision::kFp16: {
      const cudaDataType_t type = ToHalfWidth(s, p, StridedSpan(ta ? k : m, ta ? m : k, lda, stride_a, batch), a, a16,
                                              StridedSpan(tb ? n : k, tb ? k : n, ldb, stride_b, batch), b, b16);
      SHOAL_CUDA_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, n, m, k, &alpha, b16, type, ldb, stride_b, a16, type,
                                                  lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c, batch,
                                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
    }
  }
}

}  // namespace shoal::cuda
