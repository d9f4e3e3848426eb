// The GPT decoder (nn/gpt.h) and its attention (nn/attention.h): the spec grammar; attention
// against a naive double-precision reference and central differences; the whole model's loss
// and every gradient against PyTorch (tests/data/gpt_ref.json, written by
// tests/data/gen_gpt_ref.py) and against central differences; causality (no position sees a
// later one); activation checkpointing's gradients bit-identical to plain backprop; and a few
// SGD steps on a periodic sequence driving the loss down.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "grad_check.h"
#include "nn/attention.h"
#include "nn/evaluate.h"
#include "nn/gpt.h"

namespace shoal::nn {
namespace {

using testing::GradientMatches;
using testing::UniformVector;

TEST(GptSpecTest, DefaultsCanonicalFormAndRefusals) {
  auto bare = ParseGptSpec("gpt");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(GptSpecToString(*bare), "gpt:layers=3,dim=96,heads=4,ctx=64");
  auto some = ParseGptSpec("gpt:ctx=128,layers=6,ckpt=1");
  ASSERT_TRUE(some.ok()) << some.status().ToString();
  EXPECT_EQ(GptSpecToString(*some), "gpt:layers=6,dim=96,heads=4,ctx=128,ckpt=1");
  EXPECT_EQ(*ParseGptSpec(GptSpecToString(*some)), *some);
  for (const char* bad : {"gpt:", "gpt:layers", "gpt:layers=0", "gpt:dim=10,heads=3", "gpt:depth=2", "gpt:ctx=4097",
                          "gpt:layers=2,", "gpt:ckpt=2", "gpt:dim=1e3", "gpt;layers=2"}) {
    auto spec = ParseGptSpec(bad);
    EXPECT_FALSE(spec.ok()) << bad;
    EXPECT_NE(spec.status().message().find(std::string("'") + bad + "'"), std::string::npos) << spec.status().message();
  }
}

// out[b, i, h] = sum_j P[i, j] V[j], P = softmax over j <= i of Q_i . K_j / sqrt(hd), in double.
std::vector<double> NaiveAttention(const AttentionShape& s, const std::vector<float>& qkv) {
  const int d = s.dim(), w = 3 * d, hd = s.head_dim;
  std::vector<double> out(static_cast<size_t>(s.batch) * s.seq * d, 0.0);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h)
      for (int i = 0; i < s.seq; ++i) {
        std::vector<double> logits(i + 1);
        double top = -1e300, z = 0.0;
        for (int j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (int c = 0; c < hd; ++c)
            dot += static_cast<double>(qkv[(b * s.seq + i) * w + h * hd + c]) * qkv[(b * s.seq + j) * w + d + h * hd + c];
          logits[j] = dot / std::sqrt(static_cast<double>(hd));
          top = std::max(top, logits[j]);
        }
        for (double& l : logits) z += l = std::exp(l - top);
        for (int j = 0; j <= i; ++j)
          for (int c = 0; c < hd; ++c)
            out[(b * s.seq + i) * d + h * hd + c] += logits[j] / z * qkv[(b * s.seq + j) * w + 2 * d + h * hd + c];
      }
  return out;
}

TEST(CausalAttention, MatchesANaiveReferenceAndFiniteDifferences) {
  auto be = MakeCpuBackend();
  const AttentionShape s{2, 5, 3, 4};
  const size_t rows = static_cast<size_t>(s.batch) * s.seq;
  auto qkv = UniformVector(rows * 3 * s.dim(), -1.5f, 1.5f, 51);
  std::vector<float> probs(s.probs_size()), out(rows * s.dim());
  CausalAttentionForward(be.get(), s, qkv.data(), probs.data(), out.data(), Precision::kFp32);
  const auto want = NaiveAttention(s, qkv);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << i;

  const auto w = UniformVector(out.size(), -1.0f, 1.0f, 52);
  auto loss = [&]() {
    std::vector<float> p(s.probs_size()), o(out.size());
    CausalAttentionForward(be.get(), s, qkv.data(), p.data(), o.data(), Precision::kFp32);
    return testing::Dot(w, o.data());
  };
  std::vector<float> dprobs(s.probs_size()), dqkv(qkv.size());
  CausalAttentionBackward(be.get(), s, qkv.data(), probs.data(), w.data(), dprobs.data(), dqkv.data(), Precision::kFp32);
  EXPECT_TRUE(GradientMatches(loss, &qkv, dqkv, 1e-2f, 2e-2, 2e-4));
}

struct Reference {
  nlohmann::json j;
  std::vector<int32_t> tokens, targets;
  std::vector<float> params, grads;
};

const Reference& TorchReference() {
  static const Reference ref = [] {
    Reference r;
    const std::string path = std::string(SHOAL_TEST_DATA_DIR) + "/gpt_ref.json";
    std::ifstream in(path);
    if (!in) {
      ADD_FAILURE() << "cannot open " << path << " (regenerate with /usr/bin/python3 tests/data/gen_gpt_ref.py)";
      return r;
    }
    r.j = nlohmann::json::parse(in);
    r.tokens = r.j["tokens"].get<std::vector<int32_t>>();
    r.targets = r.j["targets"].get<std::vector<int32_t>>();
    r.params = r.j["params"].get<std::vector<float>>();
    r.grads = r.j["grads"].get<std::vector<float>>();
    return r;
  }();
  return ref;
}

std::unique_ptr<Gpt> MakeGpt(Backend* be, const std::string& spec, int32_t vocab) {
  auto parsed = ParseGptSpec(spec);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto gpt = Gpt::Create(*parsed, vocab, be);
  EXPECT_TRUE(gpt.ok()) << gpt.status().ToString();
  return std::move(*gpt);
}

TEST(Gpt, LossAndEveryGradientMatchPyTorch) {
  const Reference& ref = TorchReference();
  ASSERT_FALSE(ref.params.empty());
  auto be = MakeCpuBackend();
  for (const std::string ckpt : {"", ",ckpt=1"}) {
    auto gpt = MakeGpt(be.get(), ref.j["spec"].get<std::string>() + ckpt, ref.j["vocab"].get<int32_t>());
    ASSERT_EQ(gpt->num_params(), ref.params.size());
    const int rows = ref.j["rows"], seq = ref.j["seq"];
    std::vector<float> grads(gpt->num_params(), NAN);
    const LossSums sums = gpt->ForwardBackward(ref.params.data(), Batch::Tokens(ref.tokens.data(), ref.targets.data(), rows, seq),
                                               grads.data(), 1.0f);
    EXPECT_NEAR(sums.loss_sum / (rows * seq), ref.j["loss"].get<double>(), 1e-5);
    double worst = 0.0;
    size_t worst_at = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      const double err = std::fabs(grads[i] - ref.grads[i]) / (1e-3 + std::fabs(ref.grads[i]));
      if (!(err <= worst)) worst = err, worst_at = i;
    }
    EXPECT_LE(worst, 1e-3) << "gradient " << worst_at << ": " << grads[worst_at] << " vs torch " << ref.grads[worst_at]
                           << " (" << gpt->spec() << ")";
    // The positions past seq never took part: their position-embedding gradient is exactly 0.
    EXPECT_EQ(grads[ref.j["vocab"].get<size_t>() * 8 + 5 * 8], 0.0f);
  }
}

TEST(Gpt, GradientMatchesCentralDifferences) {
  auto be = MakeCpuBackend();
  auto gpt = MakeGpt(be.get(), "gpt:layers=2,dim=8,heads=2,ctx=4", 7);
  // Weights of order one (not the init's 0.02), so every path carries gradient, and
  // LayerNorm gains near 1.
  ParameterArena arena(gpt->Layout());
  std::vector<float> params = UniformVector(arena.size(), -0.5f, 0.5f, 3);
  for (const auto& view : arena.views())
    if (view.spec.name.find("ln") != std::string::npos && view.spec.name.ends_with(".weight"))
      for (size_t i = 0; i < view.size; ++i) params[view.offset + i] += 1.0f;
  const std::vector<int32_t> tokens = {1, 4, 4, 0, 6, 2, 3, 5}, targets = {4, 4, 0, 6, 2, 3, 5, 1};
  const Batch batch = Batch::Tokens(tokens.data(), targets.data(), 2, 4);
  std::vector<float> grads(params.size());
  gpt->ForwardBackward(params.data(), batch, grads.data(), 1.0f);
  auto loss = [&]() { return gpt->ForwardLoss(params.data(), batch).loss_sum / 8.0; };
  EXPECT_TRUE(GradientMatches(loss, &params, grads, 3e-3f, 2e-2, 2e-4));
}

TEST(Gpt, NoPositionSeesALaterToken) {
  auto be = MakeCpuBackend();
  auto gpt = MakeGpt(be.get(), "gpt:layers=2,dim=16,heads=4,ctx=8", 13);
  ParameterArena arena;
  gpt->Init(&arena, 9);
  std::vector<int32_t> a = {3, 1, 4, 1, 5, 9, 2, 6};
  const std::vector<float> before(gpt->Logits(arena.data(), a.data(), 1, 8), gpt->Logits(arena.data(), a.data(), 1, 8) + 8 * 13);
  for (int changed = 1; changed < 8; ++changed) {
    std::vector<int32_t> b = a;
    b[changed] = (b[changed] + 5) % 13;
    const float* after = gpt->Logits(arena.data(), b.data(), 1, 8);
    for (int pos = 0; pos < 8; ++pos) {
      bool same = true;
      for (int v = 0; v < 13; ++v) same = same && after[pos * 13 + v] == before[pos * 13 + v];
      if (pos < changed)
        EXPECT_TRUE(same) << "position " << pos << " changed with token " << changed;
      else
        EXPECT_FALSE(same) << "position " << pos << " ignores token " << changed;
    }
  }
}

TEST(Gpt, ABatchLongerThanTheContextIsRefused) {
  auto be = MakeCpuBackend();
  auto gpt = MakeGpt(be.get(), "gpt:layers=1,dim=8,heads=2,ctx=4", 5);
  ParameterArena arena;
  gpt->Init(&arena, 1);
  const std::vector<int32_t> tokens(10, 1), targets(10, 2);
  std::vector<float> grads(arena.size());
  EXPECT_TRUE(std::isnan(gpt->ForwardBackward(arena.data(), Batch::Tokens(tokens.data(), targets.data(), 2, 5),
                                              grads.data(), 1.0f).loss_sum));
  EXPECT_TRUE(std::isnan(gpt->ForwardLoss(arena.data(), Batch::Tokens(tokens.data(), targets.data(), 2, 5)).loss_sum));
  EXPECT_EQ(gpt->Logits(arena.data(), tokens.data(), 1, 5), nullptr);
  EXPECT_NE(gpt->Logits(arena.data(), tokens.data(), 1, 4), nullptr);
}

TEST(Gpt, HeldOutTextShorterThanAWindowHasNoScore) {
  auto be = MakeCpuBackend();
  auto gpt = MakeGpt(be.get(), "gpt:layers=1,dim=8,heads=2,ctx=4", 256);
  ParameterArena arena;
  gpt->Init(&arena, 1);
  data::Dataset text;
  text.kind = data::DatasetKind::kTokens;
  text.vocab_size = 256;
  text.tokens = {'a', 'b', 'c', 'd'};  // 4 tokens: no window of 4 + 1
  text.n = 4;
  const EvalResult none = Evaluate(*gpt, std::span<const float>(arena.data(), arena.size()), text);
  EXPECT_TRUE(std::isnan(none.loss));
  EXPECT_EQ(none.num_examples, 0u);
  text.tokens.push_back('e');
  text.n = 5;
  const EvalResult one = Evaluate(*gpt, std::span<const float>(arena.data(), arena.size()), text);
  EXPECT_NEAR(one.loss, std::log(256.0), 0.05);
  EXPECT_EQ(one.num_examples, 4u);
}

TEST(Gpt, CheckpointingGivesBitIdenticalGradientsWithLessMemory) {
  auto be = MakeCpuBackend();
  auto plain = MakeGpt(be.get(), "gpt:layers=3,dim=16,heads=2,ctx=8", 20);
  auto ckpt = MakeGpt(be.get(), "gpt:layers=3,dim=16,heads=2,ctx=8,ckpt=1", 20);
  ASSERT_EQ(plain->Layout(), ckpt->Layout());
  ParameterArena arena;
  plain->Init(&arena, 4);
  std::vector<int32_t> tokens(3 * 8), targets(3 * 8);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7) % 20), targets[i] = static_cast<int32_t>((i * 7 + 7) % 20);
  const Batch batch = Batch::Tokens(tokens.data(), targets.data(), 3, 8);
  std::vector<float> g1(arena.size()), g2(arena.size());
  const LossSums l1 = plain->ForwardBackward(arena.data(), batch, g1.data(), 1.0f);
  const LossSums l2 = ckpt->ForwardBackward(arena.data(), batch, g2.data(), 1.0f);
  EXPECT_EQ(l1.loss_sum, l2.loss_sum);
  EXPECT_EQ(0, std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)));
  EXPECT_LT(ckpt->ActivationBytes(3, 8), plain->ActivationBytes(3, 8) * 2 / 3);
}

TEST(Gpt, SgdStepsLearnAPeriodicSequence) {
  auto be = MakeCpuBackend();
  auto gpt = MakeGpt(be.get(), "gpt:layers=1,dim=16,heads=2,ctx=12", 6);
  ParameterArena arena;
  gpt->Init(&arena, 5);
  std::vector<float> params(arena.data(), arena.data() + arena.size()), grads(params.size());
  std::vector<int32_t> tokens(4 * 12), targets(4 * 12);
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 12; ++i) tokens[r * 12 + i] = (r + i) % 6, targets[r * 12 + i] = (r + i + 1) % 6;
  const Batch batch = Batch::Tokens(tokens.data(), targets.data(), 4, 12);
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 60; ++step) {
    const LossSums sums = gpt->ForwardBackward(params.data(), batch, grads.data(), 1.0f);
    (step == 0 ? first : last) = sums.loss_sum / 48.0;
    for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.5f * grads[i];
  }
  EXPECT_NEAR(first, std::log(6.0), 0.05) << "the init predicts uniformly";
  EXPECT_LT(last, 0.1 * first) << first << " -> " << last;
}

}  // namespace
}  // namespace shoal::nn
