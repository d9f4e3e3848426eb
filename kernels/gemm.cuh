// Row-major GEMM through cuBLAS (column-major): C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T, i.e. cuBLAS gets B first, with m and n swapped. fp32 uses
// cublasSgemm (no TF32: exact fp32 math), tf32 cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_TF32,
// bf16/fp16 convert both operands on the device and run cublasGemmEx on tensor cores with
// fp32 accumulation and fp32 output.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/precision.h"

namespace shoal::cuda {

// a16 and b16: device scratch of at least 2*m*k and 2*k*n bytes for bf16/fp16 (unused otherwise).
void Gemm(cublasHandle_t h, cudaStream_t s, bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
          const float* b, float beta, float* c, Precision p, void* a16, void* b16);

// Backend::GemmStridedBatched the same way (cublas*StridedBatched). For bf16/fp16 the span
// each operand's batch covers is converted whole (a16/b16: 2 * span bytes, StridedSpan).
void GemmStridedBatched(cublasHandle_t h, cudaStream_t s, bool ta, bool tb, int m, int n, int k, float alpha,
                        const float* a, int lda, long long stride_a, const float* b, int ldb, long long stride_b,
                        float beta, float* c, int ldc, long long stride_c, int batch, Precision p, void* a16,
                        void* b16);
// Floats from the first element of a strided batch of [rows, cols] matrices (rows ld apart) to its last.
inline size_t StridedSpan(int rows, int cols, int ld, long long stride, int batch) {
  if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
  return static_cast<size_t>(stride) * (batch - 1) + static_cast<size_t>(rows - 1) * ld + cols;
}

}  // namespace shoal::cuda
