// Text generation from a trained GPT (shoal-generate): autoregressive sampling with a
// temperature and top-k, deterministic from a seed.
//
// Each new token: the logits of the last position given the last ctx tokens (the model has no
// KV cache, so a token costs one forward pass over the window: fine for the models Shoal
// trains on a CPU), divided by the temperature, restricted to the top_k largest (ties broken
// by the lower id), softmax, and one draw from shoal::Rng(seed). temperature 0 is greedy
// (argmax); top_k 0 means the whole vocabulary. Refuses an empty prompt, ids outside the
// vocabulary, a negative or non-finite temperature, and non-finite logits (a diverged model).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/checkpoint.h"
#include "nn/gpt.h"
#include "shoal/status.h"

namespace shoal::nn {

struct SampleOptions {
  int tokens = 200;          // new tokens to generate
  float temperature = 0.8f;  // 0: greedy
  int top_k = 40;            // 0: no cut
  uint64_t seed = 0;
};

// The prompt followed by `options.tokens` sampled ids. `params` is the model's arena in its
// backend's memory. `on_token`, when given, sees each new id as it is drawn.
StatusOr<std::vector<int32_t>> Sample(Gpt& model, const float* params, const std::vector<int32_t>& prompt,
                                      const SampleOptions& options,
                                      const std::function<void(int32_t)>& on_token = nullptr);

// A checkpoint's GPT, ready to sample: the model rebuilt from its spec (the vocabulary from
// tok_emb.weight's rows) on `backend`, and its parameters uploaded there. InvalidArgument when
// the checkpoint holds another kind of model or a layout the spec does not give.
struct LoadedGpt {
  std::unique_ptr<Gpt> model;
  DeviceArray<float> params;
};
StatusOr<LoadedGpt> LoadGpt(const Checkpoint& checkpoint, Backend* backend);

}  // namespace shoal::nn
