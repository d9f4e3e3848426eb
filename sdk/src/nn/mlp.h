// Mlp: the built-in classifier, a stack of Linear layers with an activation between them
// and softmax cross-entropy on top. "linear" is the degenerate MLP with no hidden layer. It
// implements Model (nn/model.h) over BatchKind::kFeatures batches; code outside nn/ makes one
// through the registry (nn/model_registry.h) and sees only Model.
//
// Parameters live in ONE flat arena in Layout() order:
//   fc0.weight[in, h0] fc0.bias[h0] fc1.weight[h0, h1] fc1.bias[h1] ... fcL.weight[hL-1, C] fcL.bias[C]
// Pointers, ownership and threading as for every Model (nn/model.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/model.h"
#include "nn/model_spec.h"
#include "shoal/arena.h"
#include "shoal/status.h"

namespace shoal::nn {

class Mlp final : public Model {
 public:
  // Validates the spec and the dimensions; `backend` must outlive the model.
  static StatusOr<std::unique_ptr<Mlp>> Create(const ModelSpec& spec, int64_t input_dim, int32_t num_classes,
                                               Backend* backend);

  // Model ---------------------------------------------------------------------------------
  // ModelSpecToString(mlp_spec()): "linear", "mlp:128,64", "mlp:128,64,act=gelu".
  std::string spec() const override { return ModelSpecToString(spec_); }
  ModelInputs inputs() const override { return {input_dim_, num_classes_, 0}; }
  BatchKind batch_kind() const override { return BatchKind::kFeatures; }
  Backend* backend() const override { return backend_; }

  // The parameter layout, in arena order (see the top of this file).
  std::vector<TensorSpec> Layout() const override;
  size_t num_params() const override { return num_params_; }

  // PyTorch's nn.Linear default initialization, U(-1/sqrt(in), 1/sqrt(in)) for both the
  // weight and the bias of each layer, from one shoal::Rng(seed) stream in arena order.
  void Init(ParameterArena* host_params, uint64_t seed) const override;

  // Every GEMM rounds its operands to `p` (Model::set_precision).
  void set_precision(Precision p) override { precision_ = p; }
  Precision precision() const override { return precision_; }

  // As Model::ForwardBackward, on a kFeatures batch: x is [rows, input_dim], y holds labels in
  // [0, num_classes); `correct` counts the rows whose argmax logit is the label.
  LossSums ForwardBackward(const float* params, const Batch& batch, float* grads, float loss_scale) override;
  LossSums ForwardLoss(const float* params, const Batch& batch) override;

  // The MLP's own ---------------------------------------------------------------------------
  const ModelSpec& mlp_spec() const { return spec_; }
  int64_t input_dim() const { return input_dim_; }
  int32_t num_classes() const { return num_classes_; }

  // The same passes on raw arrays (a features Batch of `batch` rows); *loss_sum and *correct
  // receive the sums on the host (either may be null).
  void ForwardBackward(const float* params, const float* x, const int32_t* y, int batch, float* grads,
                       double* loss_sum, int64_t* correct, float loss_scale = 1.0f);
  void ForwardLoss(const float* params, const float* x, const int32_t* y, int batch, double* loss_sum,
                   int64_t* correct);

  // logits[batch, num_classes] for x[batch, input_dim].
  void Forward(const float* params, const float* x, int batch, float* logits);

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
