#include "nn/mlp.h"

#include <climits>
#include <cmath>

#include "core/rng.h"
#include "nn/loss.h"

namespace shoal::nn {

StatusOr<std::unique_ptr<Mlp>> Mlp::Create(const ModelSpec& spec, int64_t input_dim, int32_t num_classes,
                                           Backend* backend) {
  const std::string name = ModelSpecToString(spec);
  if (backend == nullptr) return Status::InvalidArgument("model '" + name + "': no backend");
  if (spec.kind != "mlp" && spec.kind != "linear")
    return Status::InvalidArgument("model '" + name + "': unknown kind '" + spec.kind + "', expected mlp or linear");
  if (spec.kind == "mlp" && spec.hidden.empty())
    return Status::InvalidArgument("model '" + name + "': an mlp needs at least one hidden layer (use 'linear')");
  if (spec.kind == "linear" && !spec.hidden.empty())
    return Status::InvalidArgument("model '" + name + "': 'linear' has no hidden layers");
  for (int w : spec.hidden)
    if (w <= 0 || w > kMaxHiddenWidth)
      return Status::InvalidArgument("model '" + name + "': hidden width " + std::to_string(w) +
                                     " is outside [1, " + std::to_string(kMaxHiddenWidth) + "]");
  SHOAL_ASSIGN_OR_RETURN(Activation activation, ParseActivation(spec.activation));
  if (input_dim <= 0 || input_dim > INT_MAX / 4)
    return Status::InvalidArgument("model '" + name + "': input dimension " + std::to_string(input_dim) +
                                   " is not in [1, " + std::to_string(INT_MAX / 4) + "]");
  if (num_classes < 2)
    return Status::InvalidArgument("model '" + name + "': needs at least 2 classes, the data has " +
                                   std::to_string(num_classes));
  return std::unique_ptr<Mlp>(new Mlp(spec, activation, input_dim, num_classes, backend));
}

Mlp::Mlp(ModelSpec spec, Activation activation, int64_t input_dim, int32_t num_classes, Backend* backend)
    : spec_(std::move(spec)),
      activation_(activation),
      input_dim_(input_dim),
      num_classes_(num_classes),
      backend_(backend) {
  // Lay the tensors out in arena order: weight then bias, layer by layer.
  std::vector<int> widths = spec_.hidden;
  widths.push_back(num_classes_);
  int in = static_cast<int>(input_dim_);
  size_t offset = 0;
  for (int out : widths) {
    const size_t weight_offset = offset;
    const size_t bias_offset = weight_offset + static_cast<size_t>(in) * out;
    layers_.emplace_back(in, out, weight_offset, bias_offset);
    offset = bias_offset + out;
    max_width_ = std::max(max_width_, out);
    in = out;
  }
  num_params_ = offset;
}

std::vector<TensorSpec> Mlp::Layout() const {
  std::vector<TensorSpec> layout;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string prefix = "fc" + std::to_string(i);
    layout.push_back({prefix + ".weight", {layers_[i].in(), layers_[i].out()}});
    layout.push_back({prefix + ".bias", {layers_[i].out()}});
  }
  return layout;
}

void Mlp::Init(ParameterArena* host_params, uint64_t seed) const {
  const std::vector<TensorSpec> layout = Layout();
  if (host_params->Layout() != layout) *host_params = ParameterArena(layout);
  // One stream for the whole model, in arena order, so the bytes depend only on the layout
  // and the seed. Weight and bias of a layer share the bound 1/sqrt(fan_in).
  Rng rng(seed);
  for (size_t t = 0; t < host_params->num_tensors(); ++t) {
    const Linear& layer = layers_[t / 2];
    const float bound = 1.0f / std::sqrt(static_cast<float>(layer.in()));
    for (float& v : host_params->tensor(t)) v = bound * (2.0f * rng.Uniform() - 1.0f);
  }
}

void Mlp::EnsureScratch(int batch) {
  if (batch <= capacity_) return;
  // Grow geometrically-ish (at least double) so a ragged last batch does not reallocate.
  const int rows = std::max(batch, capacity_ * 2);
  pre_.clear();
  post_.clear();
  for (int width : spec_.hidden) {
    pre_.emplace_back(backend_, static_cast<size_t>(rows) * width);
    post_.emplace_back(backend_, static_cast<size_t>(rows) * width);
  }
  logits_ = DeviceArray<float>(backend_, static_cast<size_t>(rows) * num_classes_);
  grad_a_ = DeviceArray<float>(backend_, static_cast<size_t>(rows) * max_width_);
  grad_b_ = DeviceArray<float>(backend_, static_cast<size_t>(rows) * max_width_);
  capacity_ = rows;
}

void Mlp::RunForward(const float* params, const float* x, int batch, float* logits) {
  const float* in = x;
  const size_t last = layers_.size() - 1;
  for (size_t i = 0; i < last; ++i) {
    layers_[i].Forward(backend_, params, in, batch, pre_[i].get(), precision_);
    ActivationForward(backend_, activation_, static_cast<size_t>(batch) * layers_[i].out(), pre_[i].get(),
                      post_[i].get());
    in = post_[i].get();
  }
  layers_[last].Forward(backend_, params, in, batch, logits, precision_);
}

void Mlp::Forward(const float* params, const float* x, int batch, float* logits) {
  if (batch <= 0) return;
  EnsureScratch(batch);
  RunForward(params, x, batch, logits);
}

LossSums Mlp::ForwardLoss(const float* params, const Batch& batch) {
  const int rows = batch.rows;
  if (rows <= 0) return {};
  EnsureScratch(rows);
  RunForward(params, batch.features, rows, logits_.get());
  return SoftmaxCrossEntropy(backend_, rows, num_classes_, logits_.get(), batch.labels, nullptr);
}

LossSums Mlp::ForwardBackward(const float* params, const Batch& batch, float* grads, float loss_scale) {
  const int rows = batch.rows;
  const float* x = batch.features;
  if (rows <= 0) {
    UploadZeros(backend_, grads, num_params_);  // no examples: a zero gradient
    return {};
  }
  EnsureScratch(rows);
  RunForward(params, x, rows, logits_.get());
  // dL/dlogits into grad_a_.
  const LossSums sums = SoftmaxCrossEntropy(backend_, rows, num_classes_, logits_.get(), batch.labels, grad_a_.get());
  if (loss_scale != 1.0f) backend_->Scale(static_cast<size_t>(rows) * num_classes_, loss_scale, grad_a_.get());
  // Walk the layers top-down. Invariant: grad_a_ holds dL/d(output of layer i) before the
  // activation, i.e. dL/d(pre_[i]) for hidden layers and dL/dlogits for the last one.
  for (size_t i = layers_.size(); i-- > 0;) {
    const float* input = i == 0 ? x : post_[i - 1].get();
    // The first layer's dL/dx is never needed: skip that GEMM.
    float* dinput = i == 0 ? nullptr : grad_b_.get();
    layers_[i].Backward(backend_, params, input, grad_a_.get(), rows, grads, dinput, precision_);
    const Linear& layer = layers_[i];  // W then b, contiguous
    AnnounceGradient(layer.weight_offset(), layer.bias_offset() + layer.out() - layer.weight_offset());
    if (i > 0) {
      // dL/d(pre_[i-1]) = f'(pre_[i-1]) * dL/d(post_[i-1]), back into grad_a_.
      ActivationBackward(backend_, activation_, static_cast<size_t>(rows) * layers_[i - 1].out(),
                         pre_[i - 1].get(), grad_b_.get(), grad_a_.get());
    }
  }
  return sums;
}

namespace {

void Store(const LossSums& sums, double* loss_sum, int64_t* correct) {
  if (loss_sum) *loss_sum = sums.loss_sum;
  if (correct) *correct = sums.correct;
}

}  // namespace

void Mlp::ForwardLoss(const float* params, const float* x, const int32_t* y, int batch, double* loss_sum,
                      int64_t* correct) {
  Store(ForwardLoss(params, Batch::Features(x, y, batch)), loss_sum, correct);
}

void Mlp::ForwardBackward(const float* params, const float* x, const int32_t* y, int batch, float* grads,
                          double* loss_sum, int64_t* correct, float loss_scale) {
  Store(ForwardBackward(params, Batch::Features(x, y, batch), grads, loss_scale), loss_sum, correct);
}

}  // namespace shoal::nn
