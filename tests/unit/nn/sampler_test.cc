// Sampling from a GPT (nn/sampler.h): a model trained on a periodic sequence continues it
// greedily; draws are reproducible from the seed and respect top-k; bad prompts and settings
// are refused; a checkpoint round trip rebuilds the same model.
#include <gtest/gtest.h>

#include <set>

#include "core/checkpoint.h"
#include "nn/sampler.h"
#include "../common/temp_dir.h"

namespace shoal::nn {
namespace {

constexpr int kVocab = 6, kPeriod = 6;

// A 1-layer GPT fitted to "0 1 2 3 4 5 0 1 ..." by a few hundred SGD steps.
struct Trained {
  std::unique_ptr<Backend> be = MakeCpuBackend();
  std::unique_ptr<Gpt> gpt;
  ParameterArena arena;
  Trained() {
    gpt = std::move(Gpt::Create(*ParseGptSpec("gpt:layers=1,dim=16,heads=2,ctx=8"), kVocab, be.get()).value());
    gpt->Init(&arena, 1);
    std::vector<float> grads(arena.size());
    std::vector<int32_t> tokens(kPeriod * 8), targets(kPeriod * 8);
    for (int r = 0; r < kPeriod; ++r)
      for (int i = 0; i < 8; ++i) tokens[r * 8 + i] = (r + i) % kPeriod, targets[r * 8 + i] = (r + i + 1) % kPeriod;
    for (int step = 0; step < 150; ++step) {
      gpt->ForwardBackward(arena.data(), Batch::Tokens(tokens.data(), targets.data(), kPeriod, 8), grads.data(), 1.0f);
      for (size_t i = 0; i < grads.size(); ++i) arena.data()[i] -= 0.5f * grads[i];
    }
  }
};

const Trained& Model() {
  static Trained t;
  return t;
}

TEST(Sampler, GreedyContinuesTheLearnedSequencePastTheContext) {
  Trained& t = const_cast<Trained&>(Model());
  SampleOptions o;
  o.tokens = 20;  // more than ctx: the window slides
  o.temperature = 0.0f;
  std::vector<int32_t> seen;
  auto out = Sample(*t.gpt, t.arena.data(), {3, 4}, o, [&](int32_t id) { seen.push_back(id); });
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 22u);
  for (size_t i = 0; i < out->size(); ++i) EXPECT_EQ((*out)[i], static_cast<int32_t>((3 + i) % kPeriod)) << i;
  EXPECT_EQ(seen, std::vector<int32_t>(out->begin() + 2, out->end()));
}

TEST(Sampler, DrawsAreReproducibleFromTheSeedAndStayInTheTopK) {
  Trained& t = const_cast<Trained&>(Model());
  SampleOptions o;
  o.tokens = 200;
  o.temperature = 5.0f;  // flat enough that several ids are drawn
  o.top_k = 2;
  o.seed = 7;
  auto a = Sample(*t.gpt, t.arena.data(), {0}, o);
  auto b = Sample(*t.gpt, t.arena.data(), {0}, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  o.seed = 8;
  EXPECT_NE(*Sample(*t.gpt, t.arena.data(), {0}, o), *a);
  // With top-2, each draw is one of the two likeliest ids given its window, and both occur.
  int runner_up = 0;
  for (size_t i = 1; i < a->size(); ++i) {
    const size_t from = i > 8 ? i - 8 : 0;
    const std::vector<int32_t> window(a->begin() + from, a->begin() + i);
    const float* logits = t.gpt->Logits(t.arena.data(), window.data(), 1, static_cast<int>(window.size()));
    const float* last = logits + (window.size() - 1) * kVocab;
    int above = 0;  // ids strictly likelier than the one drawn
    for (int v = 0; v < kVocab; ++v) above += last[v] > last[(*a)[i]];
    EXPECT_LE(above, 1) << "draw " << i << " is not in the top 2";
    runner_up += above == 1;
  }
  EXPECT_GT(runner_up, 0) << "at temperature 5 the runner-up is drawn sometimes";
}

TEST(Sampler, RefusesBadPromptsAndSettings) {
  Trained& t = const_cast<Trained&>(Model());
  SampleOptions o;
  EXPECT_EQ(Sample(*t.gpt, t.arena.data(), {}, o).status().code(), StatusCode::kInvalidArgument);
  auto outside = Sample(*t.gpt, t.arena.data(), {1, kVocab}, o);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("outside the vocabulary"), std::string::npos);
  o.temperature = -1.0f;
  EXPECT_FALSE(Sample(*t.gpt, t.arena.data(), {1}, o).ok());
}

TEST(Sampler, ACheckpointRebuildsTheModel) {
  const Trained& t = Model();
  testing::TempDir dir;
  Checkpoint ckpt;
  ckpt.model_spec = t.gpt->spec();
  ckpt.params = t.arena;
  ASSERT_TRUE(WriteCheckpoint(dir.File("gpt.ckpt"), ckpt).ok());
  auto read = ReadCheckpoint(dir.File("gpt.ckpt"));
  ASSERT_TRUE(read.ok());
  auto be = MakeCpuBackend();
  auto loaded = LoadGpt(*read, be.get());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->model->inputs().vocab_size, kVocab);
  SampleOptions o;
  o.tokens = 6;
  o.temperature = 0.0f;
  EXPECT_EQ(*Sample(*loaded->model, loaded->params.get(), {2}, o), (std::vector<int32_t>{2, 3, 4, 5, 0, 1, 2}));
  ckpt.model_spec = "mlp:64";
  EXPECT_NE(LoadGpt(ckpt, be.get()).status().message().find("not a gpt"), std::string::npos);
  ckpt.model_spec = "gpt:layers=2,dim=16,heads=2,ctx=8";
  EXPECT_NE(LoadGpt(ckpt, be.get()).status().message().find("layout"), std::string::npos);
}

}  // namespace
}  // namespace shoal::nn
