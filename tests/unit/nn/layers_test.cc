// Backward passes of the layers against central finite differences of their forward passes.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "grad_check.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"

namespace shoal::nn {
namespace {

using testing::AwayFromZero;
using testing::Dot;
using testing::GradientMatches;
using testing::UniformVector;

constexpr float kH = 1e-3f;
constexpr double kRtol = 1e-2;
constexpr double kAtol = 1e-4;

class LayersTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = MakeCpuBackend();
};

// The checker itself must be able to fail: a gradient off by 5% is rejected.
TEST_F(LayersTest, GradientCheckerRejectsAWrongGradient) {
  std::vector<float> x = UniformVector(6, -1.0f, 1.0f, 1);
  auto f = [&] {
    double s = 0.0;
    for (float v : x) s += static_cast<double>(v) * v * v;  // sum x^3
    return s;
  };
  std::vector<float> right(x.size()), wrong(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    right[i] = 3.0f * x[i] * x[i];
    wrong[i] = right[i] * 1.05f + 0.01f;
  }
  EXPECT_TRUE(GradientMatches(f, &x, right, kH, kRtol, kAtol));
  EXPECT_FALSE(GradientMatches(f, &x, wrong, kH, kRtol, kAtol));
}

TEST_F(LayersTest, LinearForwardMatchesDefinition) {
  const int in = 3, out = 2, batch = 2;
  // Arena with padding around the tensors: W at offset 1, b at offset 8.
  std::vector<float> params = {99, 1, 2, 3, 4, 5, 6, 99, 0.5f, -0.25f};
  Linear layer(in, out, 1, 8);
  std::vector<float> x = {1, 0, -1, 2, 1, 0.5f};
  std::vector<float> y(batch * out);
  layer.Forward(backend_.get(), params.data(), x.data(), batch, y.data());
  // W = [[1,2],[3,4],[5,6]] ([in, out] row-major), b = [0.5, -0.25].
  EXPECT_FLOAT_EQ(y[0], 1 * 1 + 0 * 3 + -1 * 5 + 0.5f);
  EXPECT_FLOAT_EQ(y[1], 1 * 2 + 0 * 4 + -1 * 6 - 0.25f);
  EXPECT_FLOAT_EQ(y[2], 2 * 1 + 1 * 3 + 0.5f * 5 + 0.5f);
  EXPECT_FLOAT_EQ(y[3], 2 * 2 + 1 * 4 + 0.5f * 6 - 0.25f);
}

TEST_F(LayersTest, LinearBackwardMatchesFiniteDifferences) {
  const int in = 5, out = 4, batch = 3;
  const size_t w_off = 3, b_off = w_off + in * out + 2, arena = b_off + out + 1;
  Linear layer(in, out, w_off, b_off);
  std::vector<float> params = UniformVector(arena, -1.0f, 1.0f, 2);
  std::vector<float> x = UniformVector(batch * in, -1.0f, 1.0f, 3);
  const std::vector<float> r = UniformVector(batch * out, -1.0f, 1.0f, 4);  // loss = sum r * y
  std::vector<float> y(batch * out);
  auto loss = [&] {
    layer.Forward(backend_.get(), params.data(), x.data(), batch, y.data());
    return Dot(r, y.data());
  };

  // Sentinels outside the layer's slots must survive Backward.
  constexpr float kSentinel = 12345.0f;
  std::vector<float> grads(arena, kSentinel);
  std::vector<float> dx(batch * in);
  layer.Backward(backend_.get(), params.data(), x.data(), r.data(), batch, grads.data(), dx.data());
  for (size_t i = 0; i < arena; ++i) {
    const bool inside = (i >= w_off && i < w_off + in * out) || (i >= b_off && i < b_off + out);
    if (!inside) {
      EXPECT_EQ(grads[i], kSentinel) << "Backward wrote outside its slots at " << i;
    }
  }
  // The padding is not a parameter of the layer: its gradient is 0.
  std::vector<float> analytic(arena, 0.0f);
  for (size_t i = w_off; i < w_off + in * out; ++i) analytic[i] = grads[i];
  for (size_t i = b_off; i < b_off + out; ++i) analytic[i] = grads[i];

  EXPECT_TRUE(GradientMatches(loss, &params, analytic, kH, kRtol, kAtol)) << "d/dparams";
  EXPECT_TRUE(GradientMatches(loss, &x, dx, kH, kRtol, kAtol)) << "d/dx";
}

TEST_F(LayersTest, LinearBackwardWithoutDxStillFillsParameterGradients) {
  const int in = 4, out = 3, batch = 2;
  Linear layer(in, out, 0, in * out);
  std::vector<float> params = UniformVector(layer.num_params(), -1.0f, 1.0f, 5);
  std::vector<float> x = UniformVector(batch * in, -1.0f, 1.0f, 6);
  std::vector<float> dy = UniformVector(batch * out, -1.0f, 1.0f, 7);
  std::vector<float> with_dx(layer.num_params()), without_dx(layer.num_params()), dx(batch * in);
  layer.Backward(backend_.get(), params.data(), x.data(), dy.data(), batch, with_dx.data(), dx.data());
  layer.Backward(backend_.get(), params.data(), x.data(), dy.data(), batch, without_dx.data(), nullptr);
  EXPECT_EQ(with_dx, without_dx);
}

class ActivationTest : public LayersTest, public ::testing::WithParamInterface<Activation> {};

TEST_P(ActivationTest, BackwardMatchesFiniteDifferences) {
  const size_t n = 24;
  // |x| >= 0.2: no central difference straddles the ReLU kink.
  std::vector<float> x = AwayFromZero(n, 0.2f, 3.0f, 8);
  const std::vector<float> r = UniformVector(n, -1.0f, 1.0f, 9);
  std::vector<float> y(n);
  auto loss = [&] {
    ActivationForward(backend_.get(), GetParam(), n, x.data(), y.data());
    return Dot(r, y.data());
  };
  std::vector<float> dx(n);
  ActivationBackward(backend_.get(), GetParam(), n, x.data(), r.data(), dx.data());
  EXPECT_TRUE(GradientMatches(loss, &x, dx, kH, kRtol, kAtol));
}

TEST_P(ActivationTest, ForwardMatchesDefinition) {
  const std::vector<float> x = {-2.0f, -0.5f, 0.0f, 0.7f, 3.0f};
  std::vector<float> y(x.size());
  ActivationForward(backend_.get(), GetParam(), x.size(), x.data(), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double expected = GetParam() == Activation::kRelu ? std::max(xi, 0.0)
                                                            : 0.5 * xi * (1.0 + std::erf(xi / std::sqrt(2.0)));
    EXPECT_NEAR(y[i], expected, 1e-6) << ActivationName(GetParam()) << "(" << xi << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(All, ActivationTest, ::testing::Values(Activation::kRelu, Activation::kGelu),
                         [](const auto& param_info) { return std::string(ActivationName(param_info.param)); });

TEST(ActivationParse, NamesAndErrors) {
  EXPECT_EQ(*ParseActivation("relu"), Activation::kRelu);
  EXPECT_EQ(*ParseActivation("gelu"), Activation::kGelu);
  auto bad = ParseActivation("tanh");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tanh"), std::string::npos);
}

TEST_F(LayersTest, SoftmaxCrossEntropyValueAndGradient) {
  const int batch = 4, classes = 5;
  std::vector<float> logits = UniformVector(batch * classes, -2.0f, 2.0f, 10);
  const std::vector<int32_t> labels = {0, 3, 4, 1};

  // Loss against a direct double-precision computation.
  double expected = 0.0;
  int64_t expected_correct = 0;
  for (int r = 0; r < batch; ++r) {
    const float* z = logits.data() + r * classes;
    double denom = 0.0;
    int argmax = 0;
    for (int c = 0; c < classes; ++c) {
      denom += std::exp(static_cast<double>(z[c]));
      if (z[c] > z[argmax]) argmax = c;
    }
    expected += std::log(denom) - z[labels[r]];
    if (argmax == labels[r]) ++expected_correct;
  }
  std::vector<float> dlogits(batch * classes);
  LossSums sums = SoftmaxCrossEntropy(backend_.get(), batch, classes, logits.data(), labels.data(), dlogits.data());
  EXPECT_NEAR(sums.loss_sum, expected, 1e-5 * expected);
  EXPECT_EQ(sums.correct, expected_correct);

  // Gradient of the MEAN loss.
  auto mean_loss = [&] {
    return SoftmaxCrossEntropy(backend_.get(), batch, classes, logits.data(), labels.data(), nullptr).loss_sum /
           batch;
  };
  EXPECT_TRUE(GradientMatches(mean_loss, &logits, dlogits, kH, kRtol, kAtol));
}

TEST_F(LayersTest, SoftmaxCrossEntropyIsStableForHugeLogits) {
  const std::vector<float> logits = {1000.0f, 0.0f, -1000.0f};
  const std::vector<int32_t> label = {1};
  std::vector<float> d(3);
  LossSums sums = SoftmaxCrossEntropy(backend_.get(), 1, 3, logits.data(), label.data(), d.data());
  EXPECT_NEAR(sums.loss_sum, 1000.0, 1e-3);
  EXPECT_EQ(sums.correct, 0);
  EXPECT_NEAR(d[0], 1.0f, 1e-6);
  EXPECT_NEAR(d[1], -1.0f, 1e-6);
  EXPECT_NEAR(d[2], 0.0f, 1e-6);
}

}  // namespace
}  // namespace shoal::nn
