// Linear: the fully connected layer y = x W + b of an MLP, forward and backward.
//
// W is stored [in, out] row-major (so the forward pass is one GEMM without transposes) and
// b is [out]. The layer does not own its parameters: it knows where its two tensors sit in
// the model's flat parameter arena (and, at the same offsets, in the gradient arena).
#pragma once

#include <cstddef>

#include "backend/backend.h"

namespace shoal::nn {

class Linear {
 public:
  // weight_offset / bias_offset: positions (in floats) of W and b inside the arena.
  Linear(int in, int out, size_t weight_offset, size_t bias_offset)
      : in_(in), out_(out), weight_offset_(weight_offset), bias_offset_(bias_offset) {}

  int in() const { return in_; }
  int out() const { return out_; }
  size_t weight_offset() const { return weight_offset_; }
  size_t bias_offset() const { return bias_offset_; }
  size_t num_params() const { return static_cast<size_t>(in_) * out_ + out_; }

  // y[batch, out] = x[batch, in] W + b. `params` is the whole arena. `precision`: the GEMMs'
  // operand precision (mixed precision; the arena itself stays fp32).
  void Forward(Backend* backend, const float* params, const float* x, int batch, float* y,
               Precision precision = Precision::kFp32) const;

  // Given dy = dL/dy [batch, out] and the forward input x, OVERWRITES this layer's slots of
  // the gradient arena `grads` with dL/dW = x^T dy and dL/db = sum over rows of dy, and, when
  // dx is not null, writes dL/dx = dy W^T [batch, in].
  void Backward(Backend* backend, const float* params, const float* x, const float* dy, int batch,
                float* grads, float* dx, Precision precision = Precision::kFp32) const;

 private:
  int in_;
  int out_;
  size_t weight_offset_;
  size_t bias_offset_;
};

}  // namespace shoal::nn
