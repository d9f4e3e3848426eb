// Causal multi-head self-attention over fused projections, forward and backward.
//
// Layout: qkv[rows = batch * seq, 3 * D] holds, per token, Q (columns 0..D), K (D..2D) and V
// (2D..3D), each split into `heads` heads of head_dim = D / heads columns side by side. Per
// sequence b and head h:
//   S = Q_bh K_bh^T                    [seq, seq]   (one strided batched GEMM per sequence)
//   P = causal softmax(S / sqrt(head_dim))           (position i attends to positions <= i)
//   O_bh = P V_bh                      [seq, head_dim], written into out[rows, D] at head h's columns
// Q, K and V are read in place through leading dimensions (no transposes or copies). The
// backward pass is the same products transposed: dV = P^T dO, dP = dO V^T, dS = softmax'(dP),
// dQ = dS K, dK = dS^T Q, each scaled as the forward pass.
#pragma once

#include "backend/backend.h"

namespace shoal::nn {

struct AttentionShape {
  int batch = 0;     // sequences
  int seq = 0;       // tokens per sequence
  int heads = 0;
  int head_dim = 0;  // D = heads * head_dim
  int dim() const { return heads * head_dim; }
  size_t probs_size() const { return static_cast<size_t>(batch) * heads * seq * seq; }
};

// Writes probs [batch * heads, seq, seq] (kept for the backward pass) and out [batch * seq, D].
void CausalAttentionForward(Backend* backend, const AttentionShape& shape, const float* qkv, float* probs, float* out,
                            Precision precision);

// From dout = dL/dout [batch * seq, D]: OVERWRITES dqkv [batch * seq, 3D] with dL/dqkv; dprobs
// (probs_size() floats) is scratch.
void CausalAttentionBackward(Backend* backend, const AttentionShape& shape, const float* qkv, const float* probs,
                             const float* dout, float* dprobs, float* dqkv, Precision precision);

}  // namespace shoal::nn
