// fp32 -> bf16 / fp16 / tf32-rounded fp32 for reduced-precision GEMM operands: round to
// nearest even, IEEE overflow to Inf (as the CPU backend's RoundToBf16/RoundToFp16/RoundToTf32).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace shoal::cuda {
void LaunchToBf16(cudaStream_t s, size_t n, const float* x, __nv_bfloat16* y);
void LaunchToHalf(cudaStream_t s, size_t n, const float* x, __half* y);
}  // namespace shoal::cuda
