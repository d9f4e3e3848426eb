#include "nn/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/rng.h"

namespace shoal::nn {

StatusOr<std::vector<int32_t>> Sample(Gpt& model, const float* params, const std::vector<int32_t>& prompt,
                                      const SampleOptions& options, const std::function<void(int32_t)>& on_token) {
  const int32_t vocab = model.inputs().vocab_size;
  if (prompt.empty()) return Status::InvalidArgument("the prompt is empty: give at least one token");
  for (int32_t id : prompt)
    if (id < 0 || id >= vocab)
      return Status::InvalidArgument("prompt token " + std::to_string(id) + " is outside the vocabulary [0, " +
                                     std::to_string(vocab) + ")");
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature))
    return Status::InvalidArgument("temperature must be a finite number >= 0");
  if (options.tokens < 0 || options.top_k < 0) return Status::InvalidArgument("tokens and top-k must be >= 0");
  const int ctx = model.gpt_spec().ctx;
  const int k = options.top_k == 0 ? vocab : std::min(options.top_k, vocab);
  Backend* be = model.backend();
  std::vector<int32_t> out = prompt;
  DeviceArray<int32_t> window(be, static_cast<size_t>(ctx));
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::vector<double> weights(static_cast<size_t>(k));
  Rng rng(options.seed, 0x9e7);
  for (int t = 0; t < options.tokens; ++t) {
    const int len = std::min<int>(ctx, static_cast<int>(out.size()));
    window.Upload(out.data() + out.size() - len, static_cast<size_t>(len));
    const float* all = model.Logits(params, window.get(), 1, len);
    be->CopyToHost(logits.data(), all + static_cast<size_t>(len - 1) * vocab, sizeof(float) * vocab);
    if (!std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }))
      return Status::InvalidArgument("the model's logits are not finite after " + std::to_string(out.size()) +
                                     " tokens: the checkpoint holds a diverged model");
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    int32_t next = order[0];
    if (options.temperature > 0.0f) {
      const double top = logits[order[0]];
      double total = 0.0;
      for (int i = 0; i < k; ++i) total += weights[i] = std::exp((logits[order[i]] - top) / options.temperature);
      double u = rng.UniformDouble() * total;
      for (int i = 0; i < k; ++i) {
        next = order[i];
        if ((u -= weights[i]) < 0.0) break;
      }
    }
    out.push_back(next);
    if (on_token) on_token(next);
  }
  return out;
}

StatusOr<LoadedGpt> LoadGpt(const Checkpoint& checkpoint, Backend* backend) {
  if (!checkpoint.model_spec.starts_with("gpt"))
    return Status::InvalidArgument("the checkpoint holds model '" + checkpoint.model_spec + "', not a gpt");
  const std::vector<TensorSpec> layout = checkpoint.params.Layout();
  if (layout.empty() || layout[0].name != "tok_emb.weight" || layout[0].shape.size() != 2)
    return Status::InvalidArgument("the checkpoint's first tensor is not tok_emb.weight[vocab, dim]");
  SHOAL_ASSIGN_OR_RETURN(GptSpec spec, ParseGptSpec(checkpoint.model_spec));
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> model,
                         Gpt::Create(spec, static_cast<int32_t>(layout[0].shape[0]), backend));
  if (model->Layout() != layout)
    return Status::InvalidArgument("the checkpoint's layout [" + LayoutToString(layout) + "] is not " +
                                   checkpoint.model_spec + "'s");
  LoadedGpt loaded{std::move(model), DeviceArray<float>(backend, checkpoint.params.size())};
  loaded.params.Upload(checkpoint.params.data(), checkpoint.params.size());
  return loaded;
}

}  // namespace shoal::nn
