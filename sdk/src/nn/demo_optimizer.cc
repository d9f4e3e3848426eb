#include "nn/demo_optimizer.h"

#include <algorithm>
#include <string>

#include "codec/stages.h"

namespace shoal::nn {

DemoOptimizer::DemoOptimizer(const OptimizerConfig& config, const std::vector<TensorSpec>& layout, Backend* backend,
                             std::unique_ptr<codec::Transform> dct, std::unique_ptr<codec::Selector> topk)
    : Optimizer(LayoutSize(layout), config.learning_rate, backend),
      decay_(config.demo_decay),
      weight_decay_(config.weight_decay),
      dct_(std::move(dct)),
      topk_(std::move(topk)) {
  size_t offset = 0, largest = 0;
  for (const TensorSpec& spec : layout) {
    Tensor t;
    t.shape = codec::ToShape2D(spec);
    t.offset = offset;
    t.size = static_cast<size_t>(spec.numel());
    t.chunk = t.size > 0 ? dct_->ChunkSize(t.shape) : 0;
    offset += t.size;
    largest = std::max(largest, t.size);
    tensors_.push_back(t);
  }
  m_.assign(n_, 0.0f);
  acc_.assign(n_, 0.0f);
  q_.assign(n_, 0.0f);
  w_host_.resize(n_);
  g_host_.resize(n_);
  coeffs_.resize(largest);
  sparse_.resize(largest);
}

void DemoOptimizer::Reset() {
  steps_ = 0;
  std::fill(m_.begin(), m_.end(), 0.0f);
  std::fill(acc_.begin(), acc_.end(), 0.0f);
  std::fill(q_.begin(), q_.end(), 0.0f);
}

std::vector<float> DemoOptimizer::SaveState() const {
  std::vector<float> out = Optimizer::SaveState();  // the step count
  out.insert(out.end(), m_.begin(), m_.end());
  return out;
}

Status DemoOptimizer::LoadState(std::span<const float> state) {
  if (state.size() != 2 + n_)
    return Status::InvalidArgument("optimizer 'demo' state has " + std::to_string(state.size()) + " values, expected " +
                                   std::to_string(2 + n_));
  SHOAL_RETURN_IF_ERROR(Optimizer::LoadState(state.first(2)));
  std::copy(state.begin() + 2, state.end(), m_.begin());
  return Status::Ok();
}

void DemoOptimizer::BeginRound() { std::fill(acc_.begin(), acc_.end(), 0.0f); }

void DemoOptimizer::Step(float* w, const float* g) {
  ++steps_;
  if (n_ == 0) return;
  backend_->CopyToHost(w_host_.data(), w, n_ * sizeof(float));
  backend_->CopyToHost(g_host_.data(), g, n_ * sizeof(float));

  // m = decay * m + (g + wd * w)
  for (size_t i = 0; i < n_; ++i) {
    float gi = g_host_[i];
    if (weight_decay_ != 0.0f) gi += weight_decay_ * w_host_[i];
    m_[i] = decay_ * m_[i] + gi;
  }

  // q = IDCT(top-k per chunk of DCT(m)), tensor by tensor.
  const codec::RoundContext ctx;  // top-k is deterministic: the round's seeds are unused
  for (size_t ti = 0; ti < tensors_.size(); ++ti) {
    const Tensor& t = tensors_[ti];
    if (t.size == 0) continue;
    const std::span<const float> m_t(m_.data() + t.offset, t.size);
    const std::span<float> coeffs(coeffs_.data(), t.size);
    dct_->Forward(ti, t.shape, m_t, coeffs);
    topk_->Select(coeffs, t.chunk, ctx, ti, &indices_);
    const std::span<float> sparse(sparse_.data(), t.size);
    std::fill(sparse.begin(), sparse.end(), 0.0f);
    for (uint32_t idx : indices_) sparse[idx] = coeffs[idx];
    dct_->Inverse(t.shape, sparse, std::span<float>(q_.data() + t.offset, t.size));
  }

  // m -= q (the residual stays), Q += q, w -= lr * sign(q).
  for (size_t i = 0; i < n_; ++i) {
    const float q = q_[i];
    m_[i] -= q;
    acc_[i] += q;
    const float s = static_cast<float>((q > 0.0f) - (q < 0.0f));
    w_host_[i] -= lr_ * s;
  }
  backend_->CopyToDevice(w, w_host_.data(), n_ * sizeof(float));
}

StatusOr<std::unique_ptr<DemoOptimizer>> MakeDemoOptimizer(const OptimizerConfig& config,
                                                           const std::vector<TensorSpec>& layout, Backend* backend) {
  if (config.name != "demo")
    return Status::InvalidArgument("MakeDemoOptimizer: optimizer name is '" + config.name + "', expected demo");
  SHOAL_RETURN_IF_ERROR(ValidateOptimizerConfig(config));
  if (backend == nullptr) return Status::InvalidArgument("optimizer 'demo': no backend");
  for (const TensorSpec& spec : layout) {
    for (int64_t d : spec.shape) {
      if (d < 0) return Status::InvalidArgument("optimizer 'demo': tensor '" + spec.name + "' has a negative dimension");
    }
    if (static_cast<uint64_t>(spec.numel()) >= (uint64_t{1} << 32))
      return Status::InvalidArgument("optimizer 'demo': tensor '" + spec.name +
                                     "' has too many values for 32-bit coefficient indices");
  }
  SHOAL_ASSIGN_OR_RETURN(
      std::unique_ptr<codec::Transform> dct,
      codec::MakeDct(codec::StageSpec{"dct", {{"chunk", std::to_string(config.demo_chunk)}}}));
  SHOAL_ASSIGN_OR_RETURN(
      std::unique_ptr<codec::Selector> topk,
      codec::MakeTopK(codec::StageSpec{"topk", {{"k", std::to_string(config.demo_topk)}, {"approx", "0"}}}));
  return std::make_unique<DemoOptimizer>(config, layout, backend, std::move(dct), std::move(topk));
}

}  // namespace shoal::nn
