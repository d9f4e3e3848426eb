#include "protocol/task.h"

#include <cmath>
#include <string>

namespace shoal::protocol {

using flatbuffers::FlatBufferBuilder;

namespace {
bool Finite(double v) { return std::isfinite(v); }
}  // namespace

flatbuffers::Offset<wire::TaskConfig> BuildTask(FlatBufferBuilder& fbb, const TaskConfig& t) {
  std::vector<flatbuffers::Offset<wire::TensorDesc>> layout;
  for (const auto& spec : t.layout) layout.push_back(wire::CreateTensorDescDirect(fbb, spec.name.c_str(), &spec.shape));
  const OptimizerConfig& o = t.optimizer;
  auto opt = wire::CreateOptimizerConfigDirect(fbb, o.name.c_str(), o.learning_rate, o.momentum, o.nesterov,
                                               o.weight_decay, o.beta1, o.beta2, o.eps, o.demo_decay, o.demo_chunk,
                                               o.demo_topk);
  return wire::CreateTaskConfigDirect(fbb, t.model.c_str(), &layout, t.dataset.c_str(), opt, t.local_epochs,
                                      t.local_steps, t.batch_size, t.prox_mu, t.seed, t.test_fraction,
                                      t.codec.c_str(), t.codec_down.c_str(),
                                      t.codec_slow.empty() ? nullptr : t.codec_slow.c_str(), t.slow_below_mbps,
                                      t.feature_mean.empty() ? nullptr : &t.feature_mean,
                                      t.feature_scale.empty() ? nullptr : &t.feature_scale);
}

StatusOr<TaskConfig> DecodeTask(const wire::TaskConfig* t) {
  if (!t) return Status::Protocol("Welcome carries no task");
  SHOAL_RETURN_IF_ERROR(CheckString(t->model(), "task.model", true));
  SHOAL_RETURN_IF_ERROR(CheckString(t->dataset(), "task.dataset", false));
  SHOAL_RETURN_IF_ERROR(CheckString(t->codec(), "task.codec", false));
  TaskConfig out;
  out.model = t->model()->str();
  if (t->dataset()) out.dataset = t->dataset()->str();
  if (t->codec()) out.codec = t->codec()->str();
  SHOAL_RETURN_IF_ERROR(CheckString(t->codec_down(), "task.codec_down", false));
  if (t->codec_down()) out.codec_down = t->codec_down()->str();
  SHOAL_RETURN_IF_ERROR(CheckString(t->codec_slow(), "task.codec_slow", false));
  if (t->codec_slow()) out.codec_slow = t->codec_slow()->str();
  out.slow_below_mbps = t->slow_below_mbps();
  if (!std::isfinite(out.slow_below_mbps) || out.slow_below_mbps < 0 || (!out.codec_slow.empty() && out.slow_below_mbps == 0))
    return Status::Protocol("task.slow_below_mbps must be finite, >= 0, and > 0 with a codec_slow");
  if (!t->layout() || t->layout()->size() == 0) return Status::Protocol("task has an empty model layout");
  if (t->layout()->size() > kMaxLayoutTensors) return Status::Protocol("task layout has too many tensors");
  uint64_t total = 0;
  for (const auto* d : *t->layout()) {
    SHOAL_RETURN_IF_ERROR(CheckString(d->name(), "tensor name", true));
    if (!d->shape() || d->shape()->size() == 0 || d->shape()->size() > kMaxTensorRank)
      return Status::Protocol("tensor '" + d->name()->str() + "' has a missing or too long shape");
    TensorSpec spec{d->name()->str(), {}};
    uint64_t n = 1;
    constexpr uint64_t kMaxFloats = kMaxPayloadBytes / sizeof(float);
    for (int64_t dim : *d->shape()) {
      if (dim <= 0) return Status::Protocol("tensor '" + spec.name + "' has a dimension <= 0");
      // Checked before multiplying, so no product can wrap around.
      if (static_cast<uint64_t>(dim) > kMaxFloats / n)
        return Status::Protocol("model is larger than the protocol allows");
      spec.shape.push_back(dim);
      n *= static_cast<uint64_t>(dim);
    }
    total += n;
    if (total * sizeof(float) > kMaxPayloadBytes) return Status::Protocol("model is larger than the protocol allows");
    out.layout.push_back(std::move(spec));
  }
  const auto* o = t->optimizer();
  if (!o) return Status::Protocol("task has no optimizer");
  SHOAL_RETURN_IF_ERROR(CheckString(o->name(), "optimizer name", true));
  out.optimizer.name = o->name()->str();
  out.optimizer.learning_rate = o->learning_rate();
  out.optimizer.momentum = o->momentum();
  out.optimizer.nesterov = o->nesterov();
  out.optimizer.weight_decay = o->weight_decay();
  out.optimizer.beta1 = o->beta1();
  out.optimizer.beta2 = o->beta2();
  out.optimizer.eps = o->eps();
  out.optimizer.demo_decay = o->demo_decay();
  out.optimizer.demo_chunk = o->demo_chunk();
  out.optimizer.demo_topk = o->demo_topk();
  for (double v : {double(o->learning_rate()), double(o->momentum()), double(o->weight_decay()), double(o->beta1()),
                   double(o->beta2()), double(o->eps()), double(o->demo_decay()), double(t->prox_mu()), t->test_fraction()})
    if (!Finite(v)) return Status::Protocol("task has a non-finite number");
  out.local_epochs = t->local_epochs();
  out.local_steps = t->local_steps();
  out.batch_size = t->batch_size();
  if (out.batch_size == 0) return Status::Protocol("task batch_size is 0");
  if (out.local_epochs == 0 && out.local_steps == 0) return Status::Protocol("task has neither local epochs nor steps");
  out.prox_mu = t->prox_mu();
  out.seed = t->seed();
  out.test_fraction = t->test_fraction();
  if (out.test_fraction < 0.0 || out.test_fraction >= 1.0) return Status::Protocol("task test_fraction not in [0, 1)");
  const auto* mean = t->feature_mean();
  const auto* scale = t->feature_scale();
  if ((mean ? mean->size() : 0) != (scale ? scale->size() : 0))
    return Status::Protocol("task feature_mean and feature_scale differ in length");
  if (mean && mean->size() > kMaxFeatures) return Status::Protocol("task standardizes more features than the limit");
  for (size_t j = 0; mean && j < mean->size(); ++j) {
    if (!Finite(mean->Get(j)) || !Finite(scale->Get(j)) || !(scale->Get(j) > 0))
      return Status::Protocol("task standardization of feature " + std::to_string(j) +
                              " is not finite, or its scale is not > 0");
    out.feature_mean.push_back(mean->Get(j));
    out.feature_scale.push_back(scale->Get(j));
  }
  return out;
}

}  // namespace shoal::protocol
