// The MLP as a whole: layout, initialization, forward against a naive reference, backward
// against finite differences, training on a separable problem, and Evaluate.
#include "nn/mlp.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <limits>

#include "grad_check.h"
#include "nn/evaluate.h"
#include "nn/optimizer.h"

namespace shoal::nn {
namespace {

using testing::GradientMatches;
using testing::UniformVector;

std::unique_ptr<Mlp> MakeMlp(const std::string& spec, int64_t in, int32_t classes, Backend* backend) {
  auto parsed = ParseModelSpec(spec);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto model = Mlp::Create(*parsed, in, classes, backend);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return std::move(model).value();
}

// Naive double-precision forward pass over the flat arena; also returns every hidden
// pre-activation so tests can keep away from the ReLU kink.
std::vector<double> ReferenceLogits(const std::vector<int>& widths, bool gelu, const std::vector<float>& params,
                                    const std::vector<float>& x, int batch, std::vector<double>* pre_acts) {
  std::vector<double> act(x.begin(), x.end());
  size_t offset = 0;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    const int in = widths[l], out = widths[l + 1];
    const float* w = params.data() + offset;
    const float* b = w + static_cast<size_t>(in) * out;
    offset += static_cast<size_t>(in) * out + out;
    std::vector<double> next(static_cast<size_t>(batch) * out);
    for (int r = 0; r < batch; ++r)
      for (int o = 0; o < out; ++o) {
        double s = b[o];
        for (int i = 0; i < in; ++i) s += act[r * in + i] * w[i * out + o];
        next[r * out + o] = s;
      }
    const bool last = l + 2 == widths.size();
    if (!last) {
      for (double& v : next) {
        if (pre_acts) pre_acts->push_back(v);
        v = gelu ? 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))) : std::max(v, 0.0);
      }
    }
    act = std::move(next);
  }
  return act;
}

TEST(Mlp, LayoutNamesAndShapes) {
  auto backend = MakeCpuBackend();
  auto model = MakeMlp("mlp:128,64", 64, 10, backend.get());
  const std::vector<TensorSpec> expected = {
      {"fc0.weight", {64, 128}}, {"fc0.bias", {128}}, {"fc1.weight", {128, 64}},
      {"fc1.bias", {64}},        {"fc2.weight", {64, 10}}, {"fc2.bias", {10}},
  };
  EXPECT_EQ(model->Layout(), expected) << LayoutToString(model->Layout());
  EXPECT_EQ(model->num_params(), LayoutSize(expected));
  EXPECT_EQ(model->num_params(), 64u * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10);

  auto linear = MakeMlp("linear", 64, 10, backend.get());
  EXPECT_EQ(linear->Layout(), (std::vector<TensorSpec>{{"fc0.weight", {64, 10}}, {"fc0.bias", {10}}}));
}

TEST(Mlp, CreateRefusesBadShapes) {
  auto backend = MakeCpuBackend();
  const ModelSpec mlp = *ParseModelSpec("mlp");
  auto no_classes = Mlp::Create(mlp, 64, 1, backend.get());
  ASSERT_FALSE(no_classes.ok());
  EXPECT_EQ(no_classes.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_classes.status().message().find("2 classes"), std::string::npos) << no_classes.status().message();
  auto no_input = Mlp::Create(mlp, 0, 10, backend.get());
  ASSERT_FALSE(no_input.ok());
  EXPECT_NE(no_input.status().message().find("input dimension 0"), std::string::npos);
  EXPECT_FALSE(Mlp::Create(ModelSpec{"cnn", {}, "relu"}, 64, 10, backend.get()).ok());
  EXPECT_FALSE(Mlp::Create(ModelSpec{"mlp", {}, "relu"}, 64, 10, backend.get()).ok());
  EXPECT_FALSE(Mlp::Create(ModelSpec{"mlp", {0}, "relu"}, 64, 10, backend.get()).ok());
  EXPECT_FALSE(Mlp::Create(ModelSpec{"mlp", {8}, "swish"}, 64, 10, backend.get()).ok());
  EXPECT_FALSE(Mlp::Create(mlp, 64, 10, nullptr).ok());
}

TEST(Mlp, InitIsDeterministicAndFollowsTorchBounds) {
  auto backend = MakeCpuBackend();
  auto model = MakeMlp("mlp:128,64", 64, 10, backend.get());
  ParameterArena a, b, c;
  model->Init(&a, 42);
  model->Init(&b, 42);
  model->Init(&c, 43);
  ASSERT_EQ(a.Layout(), model->Layout());
  ASSERT_EQ(a.size(), model->num_params());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "same seed, different bytes";
  EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0) << "different seeds, same bytes";

  // Re-initializing an arena that already has the layout overwrites it in place.
  model->Init(&c, 42);
  EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);

  // Every tensor is U(-1/sqrt(fan_in), 1/sqrt(fan_in)): within bounds, nearly reaching them,
  // and centred.
  for (size_t t = 0; t < a.num_tensors(); ++t) {
    const int64_t fan_in = model->Layout()[t & ~size_t{1}].shape[0];
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    double lo = 1e9, hi = -1e9, sum = 0.0;
    for (float v : a.tensor(t)) {
      lo = std::min<double>(lo, v);
      hi = std::max<double>(hi, v);
      sum += v;
    }
    const auto n = static_cast<double>(a.tensor(t).size());
    SCOPED_TRACE(a.view(t).spec.name);
    EXPECT_GE(lo, -bound);
    EXPECT_LE(hi, bound);
    if (n >= 1000) {
      EXPECT_LT(lo, -0.95 * bound);
      EXPECT_GT(hi, 0.95 * bound);
      // Mean of U(-B, B) has standard deviation B / sqrt(3n); allow 5 of them.
      EXPECT_LT(std::fabs(sum / n), 5.0 * bound / std::sqrt(3.0 * n));
    }
  }
}

struct GradCase {
  const char* spec;
  bool gelu;
};
void PrintTo(const GradCase& c, std::ostream* os) { *os << c.spec; }

class MlpGradient : public ::testing::TestWithParam<GradCase> {};

TEST_P(MlpGradient, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  auto backend = MakeCpuBackend();
  const int64_t in = 6;
  const int32_t classes = 3;
  const int batch = 4;
  auto model = MakeMlp(GetParam().spec, in, classes, backend.get());
  std::vector<int> widths = {static_cast<int>(in)};
  for (int w : model->mlp_spec().hidden) widths.push_back(w);
  widths.push_back(classes);

  // Pick the first seed whose hidden pre-activations all stay 0.05 away from 0, so no central
  // difference crosses the ReLU kink (a perturbation of 1e-3 moves them by far less).
  ParameterArena arena;
  std::vector<float> params, x;
  for (uint64_t seed = 1;; ++seed) {
    ASSERT_LT(seed, 200u) << "no seed keeps the pre-activations away from the kink";
    model->Init(&arena, seed);
    params.assign(arena.data(), arena.data() + arena.size());
    x = UniformVector(batch * in, -1.5f, 1.5f, seed);
    std::vector<double> pre;
    ReferenceLogits(widths, GetParam().gelu, params, x, batch, &pre);
    bool far = true;
    for (double v : pre) far = far && std::fabs(v) > 0.05;
    if (far) break;
  }
  const std::vector<int32_t> y = {0, 2, 1, 2};

  // Forward against the naive reference.
  std::vector<float> logits(batch * classes);
  model->Forward(params.data(), x.data(), batch, logits.data());
  const std::vector<double> ref = ReferenceLogits(widths, GetParam().gelu, params, x, batch, nullptr);
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(logits[i], ref[i], 1e-5 * (1.0 + std::fabs(ref[i]))) << i;

  // Backward against central differences of the mean loss, for every parameter.
  std::vector<float> grads(model->num_params(), std::numeric_limits<float>::quiet_NaN());
  double loss_sum = 0.0;
  int64_t correct = -1;
  model->ForwardBackward(params.data(), x.data(), y.data(), batch, grads.data(), &loss_sum, &correct);
  // The loss and the count of correct rows, from the reference logits.
  int64_t want_correct = 0;
  double want_loss = 0.0;
  for (size_t b = 0; b < static_cast<size_t>(batch); ++b) {
    const auto row = ref.begin() + static_cast<std::ptrdiff_t>(b * classes);
    const auto top = std::max_element(row, row + classes);
    want_correct += top - row == y[b];
    double sum = 0.0;
    for (auto it = row; it != row + classes; ++it) sum += std::exp(*it - *top);
    want_loss += std::log(sum) + *top - row[y[b]];
  }
  EXPECT_EQ(correct, want_correct);
  EXPECT_NEAR(loss_sum, want_loss, 1e-5 * (1.0 + want_loss));
  for (float g : grads) ASSERT_TRUE(std::isfinite(g)) << "a gradient slot was not written";

  auto mean_loss = [&] {
    double s = 0.0;
    model->ForwardLoss(params.data(), x.data(), y.data(), batch, &s, nullptr);
    return s / batch;
  };
  EXPECT_NEAR(mean_loss(), loss_sum / batch, 1e-12);
  EXPECT_TRUE(GradientMatches(mean_loss, &params, grads, 1e-3f, 1e-2, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(All, MlpGradient,
                         ::testing::Values(GradCase{"linear", false}, GradCase{"mlp:5", false},
                                           GradCase{"mlp:5,4", false}, GradCase{"mlp:5,4,act=gelu", true}),
                         [](const auto& param_info) {
                           std::string name = param_info.param.spec;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

TEST(Mlp, ScratchGrowsAndShrinksWithTheBatch) {
  // Results for a batch must not depend on the batches run before it.
  auto backend = MakeCpuBackend();
  auto model = MakeMlp("mlp:8", 3, 2, backend.get());
  ParameterArena arena;
  model->Init(&arena, 7);
  const std::vector<float> x = UniformVector(3 * 40, -1.0f, 1.0f, 11);
  std::vector<float> small_first(2 * 2), small_after(2 * 2), big(40 * 2);
  model->Forward(arena.data(), x.data(), 2, small_first.data());
  model->Forward(arena.data(), x.data(), 40, big.data());
  model->Forward(arena.data(), x.data(), 2, small_after.data());
  EXPECT_EQ(small_first, small_after);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(big[i], small_first[i]);
}

// Three Gaussian blobs in 10 dimensions, well apart.
data::Dataset Blobs(int n, uint64_t seed) {
  data::Dataset d;
  d.name = "blobs";
  d.n = n;
  d.dim = 10;
  d.num_classes = 3;
  Rng rng(seed);
  for (int i = 0; i < n; ++i) {
    const int label = i % 3;
    for (int j = 0; j < d.dim; ++j) {
      const double centre = (j % 3 == label) ? 2.0 : -1.0;
      d.x.push_back(static_cast<float>(centre + 0.7 * rng.Normal()));
    }
    d.y.push_back(label);
  }
  return d;
}

class MlpTraining : public ::testing::TestWithParam<const char*> {};

TEST_P(MlpTraining, LearnsASeparableProblem) {
  auto backend = MakeCpuBackend();
  const data::Dataset train = Blobs(300, 1), test = Blobs(150, 2);
  auto model = MakeMlp(GetParam(), train.dim, train.num_classes, backend.get());
  ParameterArena params;
  model->Init(&params, 3);
  const EvalResult before = Evaluate(*model, params.span(), test);

  OptimizerConfig config;
  config.learning_rate = 0.1f;
  config.momentum = 0.9f;
  auto optimizer = MakeOptimizer(config, model->num_params(), backend.get());
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().ToString();
  std::vector<float> grads(model->num_params());
  const int batch = 20;
  for (int epoch = 0; epoch < 10; ++epoch) {
    for (int start = 0; start < train.n; start += batch) {
      model->ForwardBackward(params.data(), train.x.data() + start * train.dim, train.y.data() + start, batch,
                             grads.data(), nullptr, nullptr);
      (*optimizer)->Step(params.data(), grads.data());
    }
  }
  const EvalResult after = Evaluate(*model, params.span(), test);
  EXPECT_EQ(after.num_examples, 150u);
  EXPECT_LT(before.accuracy, 0.7);
  EXPECT_GE(after.accuracy, 0.97);
  EXPECT_LT(after.loss, 0.2);
  EXPECT_LT(after.loss, before.loss / 4);
}

INSTANTIATE_TEST_SUITE_P(All, MlpTraining, ::testing::Values("linear", "mlp:16", "mlp:16,16,act=gelu"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

TEST(Evaluate, MatchesADirectComputationForAnyBatchSize) {
  auto backend = MakeCpuBackend();
  const data::Dataset d = Blobs(37, 5);
  auto model = MakeMlp("mlp:6", d.dim, d.num_classes, backend.get());
  ParameterArena params;
  model->Init(&params, 9);

  // Direct: one forward over everything, loss in double.
  std::vector<float> logits(d.n * d.num_classes);
  model->Forward(params.data(), d.x.data(), static_cast<int>(d.n), logits.data());
  double loss = 0.0;
  int64_t correct = 0;
  for (int64_t r = 0; r < d.n; ++r) {
    const float* z = logits.data() + r * d.num_classes;
    double denom = 0.0;
    int argmax = 0;
    for (int c = 0; c < d.num_classes; ++c) {
      denom += std::exp(static_cast<double>(z[c]));
      if (z[c] > z[argmax]) argmax = c;
    }
    loss += std::log(denom) - z[d.y[r]];
    correct += argmax == d.y[r];
  }
  for (int batch : {1, 7, 37, 512}) {
    const EvalResult e = Evaluate(*model, params.span(), d, batch);
    EXPECT_EQ(e.num_examples, 37u) << batch;
    EXPECT_NEAR(e.loss, loss / 37, 1e-5) << batch;
    EXPECT_DOUBLE_EQ(e.accuracy, static_cast<double>(correct) / 37) << batch;
  }
}

TEST(Evaluate, RefusesMismatchedInputsInsteadOfReadingOutOfBounds) {
  auto backend = MakeCpuBackend();
  data::Dataset d = Blobs(10, 5);
  auto model = MakeMlp("mlp:6", d.dim, d.num_classes, backend.get());
  ParameterArena params;
  model->Init(&params, 9);

  const std::vector<float> short_params(params.size() - 1, 0.0f);
  EXPECT_TRUE(std::isnan(Evaluate(*model, short_params, d).loss));
  data::Dataset bad_label = d;
  bad_label.y[3] = 3;
  EXPECT_TRUE(std::isnan(Evaluate(*model, params.span(), bad_label).accuracy));
  data::Dataset bad_dim = d;
  bad_dim.dim = 9;
  EXPECT_EQ(Evaluate(*model, params.span(), bad_dim).num_examples, 0u);

  data::Dataset empty;
  empty.dim = d.dim;
  empty.num_classes = 3;
  const EvalResult e = Evaluate(*model, params.span(), empty);
  EXPECT_EQ(e.num_examples, 0u);
  EXPECT_EQ(e.loss, 0.0);
}

}  // namespace
}  // namespace shoal::nn
