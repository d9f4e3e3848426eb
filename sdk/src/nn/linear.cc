#include "nn/linear.h"

namespace shoal::nn {

void Linear::Forward(Backend* backend, const float* params, const float* x, int batch, float* y,
                     Precision precision) const {
  // y = x W (beta = 0 overwrites y), then y += b row by row.
  backend->GemmEx(false, false, batch, out_, in_, 1.0f, x, params + weight_offset_, 0.0f, y, precision);
  backend->AddBiasRows(batch, out_, params + bias_offset_, y);
}

void Linear::Backward(Backend* backend, const float* params, const float* x, const float* dy, int batch,
                      float* grads, float* dx, Precision precision) const {
  // dW[in, out] = x^T[in, batch] dy[batch, out]: x is stored [batch, in], hence trans_a.
  backend->GemmEx(true, false, in_, out_, batch, 1.0f, x, dy, 0.0f, grads + weight_offset_, precision);
  // db[out] = column sums of dy.
  backend->SumRows(batch, out_, dy, 0.0f, grads + bias_offset_);
  if (dx != nullptr) {
    // dx[batch, in] = dy[batch, out] W^T[out, in]: W is stored [in, out], hence trans_b.
    backend->GemmEx(false, true, batch, in_, out_, 1.0f, dy, params + weight_offset_, 0.0f, dx, precision);
  }
}

}  // namespace shoal::nn
