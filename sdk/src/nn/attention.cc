#include "nn/attention.h"

#include <cmath>

namespace shoal::nn {

void CausalAttentionForward(Backend* backend, const AttentionShape& s, const float* qkv, float* probs, float* out,
                            Precision precision) {
  const int d = s.dim(), width = 3 * d, hd = s.head_dim;
  const int64_t square = static_cast<int64_t>(s.seq) * s.seq;
  for (int b = 0; b < s.batch; ++b) {
    const float* q = qkv + static_cast<size_t>(b) * s.seq * width;
    float* p = probs + static_cast<size_t>(b) * s.heads * square;
    backend->GemmStridedBatched(false, true, s.seq, s.seq, hd, 1.0f, q, width, hd, q + d, width, hd, 0.0f, p, s.seq,
                                square, s.heads, precision);
  }
  backend->CausalSoftmax(s.batch * s.heads, s.seq, 1.0f / std::sqrt(static_cast<float>(hd)), probs);
  for (int b = 0; b < s.batch; ++b) {
    const float* v = qkv + static_cast<size_t>(b) * s.seq * width + 2 * d;
    const float* p = probs + static_cast<size_t>(b) * s.heads * square;
    float* o = out + static_cast<size_t>(b) * s.seq * d;
    backend->GemmStridedBatched(false, false, s.seq, hd, s.seq, 1.0f, p, s.seq, square, v, width, hd, 0.0f, o, d, hd,
                                s.heads, precision);
  }
}

void CausalAttentionBackward(Backend* backend, const AttentionShape& s, const float* qkv, const float* probs,
                             const float* dout, float* dprobs, float* dqkv, Precision precision) {
  const int d = s.dim(), width = 3 * d, hd = s.head_dim;
  const int64_t square = static_cast<int64_t>(s.seq) * s.seq;
  for (int b = 0; b < s.batch; ++b) {
    const size_t rows = static_cast<size_t>(b) * s.seq;
    const float* v = qkv + rows * width + 2 * d;
    const float* p = probs + static_cast<size_t>(b) * s.heads * square;
    const float* dout_b = dout + rows * d;
    float* dp = dprobs + static_cast<size_t>(b) * s.heads * square;
    // dP = dO V^T, dV = P^T dO.
    backend->GemmStridedBatched(false, true, s.seq, s.seq, hd, 1.0f, dout_b, d, hd, v, width, hd, 0.0f, dp, s.seq,
                                square, s.heads, precision);
    backend->GemmStridedBatched(true, false, s.seq, hd, s.seq, 1.0f, p, s.seq, square, dout_b, d, hd, 0.0f,
                                dqkv + rows * width + 2 * d, width, hd, s.heads, precision);
  }
  // dS = d(loss)/d(Q K^T), the 1/sqrt(head_dim) included.
  backend->CausalSoftmaxBackward(s.batch * s.heads, s.seq, 1.0f / std::sqrt(static_cast<float>(hd)), probs, dprobs,
                                 dprobs);
  for (int b = 0; b < s.batch; ++b) {
    const size_t rows = static_cast<size_t>(b) * s.seq;
    const float* q = qkv + rows * width;
    const float* ds = dprobs + static_cast<size_t>(b) * s.heads * square;
    // dQ = dS K, dK = dS^T Q.
    backend->GemmStridedBatched(false, false, s.seq, hd, s.seq, 1.0f, ds, s.seq, square, q + d, width, hd, 0.0f,
                                dqkv + rows * width, width, hd, s.heads, precision);
    backend->GemmStridedBatched(true, false, s.seq, hd, s.seq, 1.0f, ds, s.seq, square, q, width, hd, 0.0f,
                                dqkv + rows * width + d, width, hd, s.heads, precision);
  }
}

}  // namespace shoal::nn
