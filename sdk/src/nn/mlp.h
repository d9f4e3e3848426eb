// Mlp: the built-in classifier, a stack of Linear layers with an activation between them
// and softmax cross-entropy on top. "linear" is the degenerate MLP with no hidden layer.
//
// Parameters live in ONE flat arena in Layout() order:
//   fc0.weight[in, h0] fc0.bias[h0] fc1.weight[h0, h1] fc1.bias[h1] ... fcL.weight[hL-1, C] fcL.bias[C]
// Every pointer the compute methods take is in the backend's memory space; `params` and
// `grads` are whole arenas. The model owns only scratch buffers (activations and their
// gradients), resized when a call needs a bigger batch, so it is not thread-safe: use one
// Mlp per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/model_spec.h"
#include "shoal/arena.h"
#include "shoal/status.h"

namespace shoal::nn {

class Mlp {
 public:
  // Validates the spec and the dimensions; `backend` must outlive the model.
  static StatusOr<std::unique_ptr<Mlp>> Create(const ModelSpec& spec, int64_t input_dim, int32_t num_classes,
                                               Backend* backend);

  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  // The parameter layout, in arena order (see the top of this file).
  std::vector<TensorSpec> Layout() const;
  // Total number of parameters (LayoutSize(Layout())).
  size_t num_params() const { return num_params_; }
  int64_t input_dim() const { return input_dim_; }
  int32_t num_classes() const { return num_classes_; }
  const ModelSpec& spec() const { return spec_; }
  Backend* backend() const { return backend_; }

  // Fills *host_params (host memory; reset to Layout() if it has another layout) with
  // PyTorch's nn.Linear default initialization, U(-1/sqrt(in), 1/sqrt(in)) for both the
  // weight and the bias of each layer, drawn from shoal::Rng(seed): the same seed gives
  // the same bytes on every platform.
  void Init(ParameterArena* host_params, uint64_t seed) const;

  // Mixed precision: every GEMM rounds its operands to `p` and accumulates in fp32; the
  // parameters, activations and gradients stay fp32 (the "master" copy). Default: fp32.
  void set_precision(Precision p) { precision_ = p; }
  Precision precision() const { return precision_; }

  // One training pass over a batch: forward, loss, backward. OVERWRITES the gradient arena
  // `grads` with loss_scale * d(mean loss over the batch)/d(params) (loss_scale > 1 keeps
  // small fp16 gradients from flushing to zero; the caller unscales). x is [batch, input_dim],
  // y holds labels in [0, num_classes). On the host, *loss_sum receives the summed (not mean)
  // loss and *correct the number of rows classified correctly (either may be null).
  void ForwardBackward(const float* params, const float* x, const int32_t* y, int batch, float* grads,
                       double* loss_sum, int64_t* correct, float loss_scale = 1.0f);

  // logits[batch, num_classes] for x[batch, input_dim].
  void Forward(const float* params, const float* x, int batch, float* logits);

  // Forward plus the loss, without gradients (evaluation). Host outputs as ForwardBackward.
  void ForwardLoss(const float* params, const float* x, const int32_t* y, int batch, double* loss_sum,
                   int64_t* correct);

 private:
  Mlp(ModelSpec spec, Activation activation, int64_t input_dim, int32_t num_classes, Backend* backend);

  // Grows the scratch buffers to hold `batch` rows.
  void EnsureScratch(int batch);
  // Runs every layer; the last one writes into `logits`.
  void RunForward(const float* params, const float* x, int batch, float* logits);

  ModelSpec spec_;
  Activation activation_;
  int64_t input_dim_;
  int32_t num_classes_;
  Backend* backend_;
  Precision precision_ = Precision::kFp32;
  std::vector<Linear> layers_;  // fc0 ... fcL; the last one produces the logits
  size_t num_params_ = 0;
  int max_width_ = 0;           // widest layer output (hidden or classes)

  // Scratch, in backend memory, for `capacity_` rows.
  int capacity_ = 0;
  std::vector<DeviceArray<float>> pre_;   // pre_[i]: hidden layer i before the activation
  std::vector<DeviceArray<float>> post_;  // post_[i]: after it (the input of layer i + 1)
  DeviceArray<float> logits_;
  DeviceArray<float> grad_a_;             // ping-pong buffers for gradients flowing down
  DeviceArray<float> grad_b_;
};

}  // namespace shoal::nn
