// GPU codec kernels (DESIGN.md §3 "Codec"): the per-element work of the codec stages on a
// CUDA backend's device memory, queued on its stream. Each one follows the matching stage in
// sdk/src/codec and its wire layout, so that:
//   - decoding (dequantize, scatter, inverse DCT) is bit-identical to the host stage's Decode:
//     every output is the same IEEE operations in the same order (--fmad=false, no fast math);
//   - deterministic encoders (int8 with stochastic=0, bf16, fp16, the sign bits) produce the
//     host stage's bytes; the sign stage's scale (a mean) and QSGD's random draws (a counter-
//     based generator here, a sequential one on the host) may differ, and top-k selects the
//     same set with the same tie rule (larger |x|, then lower index).
// The host codec pipeline still encodes from an fp32 copy of the update (updates leave the
// device as fp32 deltas); these kernels are the building blocks for encoding on the device,
// and they are tested against the host stages and benchmarked against cudaMemcpy.
// All pointers are device pointers of `backend`, which must be a CUDA backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace shoal::cuda {

// Error feedback: out = delta + residual; then residual = compensated - decoded.
void ErrorFeedbackCompensate(Backend& backend, size_t n, const float* delta, const float* residual, float* out);
void ErrorFeedbackUpdate(Backend& backend, size_t n, const float* compensated, const float* decoded, float* residual);

// int8 (stage "int8", stochastic=0): per chunk s = absmax / 127, q = round-half-even(x * 127/absmax).
void QuantizeInt8(Backend& backend, size_t n, size_t chunk, const float* x, float* scales, int8_t* q);
void DequantizeInt8(Backend& backend, size_t n, size_t chunk, const float* scales, const int8_t* q, float* y);

// bf16 / fp16 wire values (stages "bf16", "fp16": round half to even, saturate, NaN -> 0).
void EncodeBf16(Backend& backend, size_t n, const float* x, uint16_t* out);
void DecodeBf16(Backend& backend, size_t n, const uint16_t* in, float* y);
void EncodeFp16(Backend& backend, size_t n, const float* x, uint16_t* out);
void DecodeFp16(Backend& backend, size_t n, const uint16_t* in, float* y);

// sign (stage "sign"): one bit per value, LSB first, 1 = sign bit set; *scale = mean |x|.
void QuantizeSign(Backend& backend, size_t n, const float* x, uint8_t* bits, float* scale);
void DequantizeSign(Backend& backend, size_t n, const uint8_t* bits, const float* scale, float* y);

// QSGD (stage "qsgd"): *norm = ||x||, codes[i] = level << 1 | sign, level unbiased in [0, levels].
void QuantizeQsgd(Backend& backend, size_t n, uint32_t levels, const float* x, uint64_t seed, uint32_t* codes,
                  float* norm);
void DequantizeQsgd(Backend& backend, size_t n, uint32_t levels, const uint32_t* codes, const float* norm, float* y);

// Fixed-width bit packing, LSB first (codec/bytes.h PackBits/UnpackBits), 1 <= bits <= 32.
void PackBits(Backend& backend, size_t n, int bits, const uint32_t* codes, uint8_t* out);
void UnpackBits(Backend& backend, size_t n, int bits, const uint8_t* in, uint32_t* codes);

// Top-k by magnitude (stage "topk", exact): the k largest |x| (ties: lower index), written as
// ascending indices and their values. k <= n.
void TopK(Backend& backend, size_t n, size_t k, const float* x, uint32_t* indices, float* values);
// y = 0, then y[indices[i]] = values[i] (the decode of a top-k payload).
void ScatterTopK(Backend& backend, size_t n, size_t k, const uint32_t* indices, const float* values, float* y);

// Chunked orthonormal DCT-II (stage "dct") of a rows x cols tensor with chunk sides R | rows,
// C | cols (R, C <= 64), coefficients chunk-major as dct.cc lays them out. Forward: coeffs =
// D_R X D_C^T per chunk; Inverse (bit-identical to the host): X = D_R^T Y D_C.
void DctForward(Backend& backend, int64_t rows, int64_t cols, int64_t R, int64_t C, const float* x, float* coeffs);
void DctInverse(Backend& backend, int64_t rows, int64_t cols, int64_t R, int64_t C, const float* coeffs, float* x);

}  // namespace shoal::cuda
