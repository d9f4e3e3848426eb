// The model registry and the Model interface: MakeModel builds the same models Mlp::Create
// does (layout, Init bytes, canonical spec), refuses unknown kinds by naming the known ones,
// and ForwardBackward through Model& matches central differences of ForwardLoss.
#include "nn/model_registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "grad_check.h"
#include "nn/mlp.h"
#include "nn/model_spec.h"

namespace shoal::nn {
namespace {

using testing::GradientMatches;
using testing::SpecParamName;
using testing::UniformVector;

std::vector<float> InitBytes(const Model& model, uint64_t seed) {
  ParameterArena arena;
  model.Init(&arena, seed);
  return {arena.data(), arena.data() + arena.size()};
}

TEST(ModelRegistry, KnowsGptMlpAndLinear) {
  EXPECT_EQ(ModelKinds(), (std::vector<std::string>{"gpt", "linear", "mlp"}));
}

class ModelRegistrySpecs : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelRegistrySpecs, MakeModelBuildsWhatMlpCreateBuilds) {
  auto backend = MakeCpuBackend();
  const ModelInputs inputs{12, 5, 0};
  auto made = MakeModel(GetParam(), inputs, backend.get());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto direct = Mlp::Create(*ParseModelSpec(GetParam()), inputs.input_dim, inputs.num_classes, backend.get());
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  const Model& model = **made;

  EXPECT_EQ(model.spec(), ModelSpecToString((*direct)->mlp_spec()));
  EXPECT_EQ(model.inputs(), inputs);
  EXPECT_EQ(model.batch_kind(), BatchKind::kFeatures);
  EXPECT_EQ(model.backend(), backend.get());
  EXPECT_EQ(model.Layout(), (*direct)->Layout()) << LayoutToString(model.Layout());
  EXPECT_EQ(model.num_params(), (*direct)->num_params());
  EXPECT_EQ(model.num_params(), LayoutSize(model.Layout()));
  for (uint64_t seed : {1u, 42u}) {
    const std::vector<float> a = InitBytes(model, seed), b = InitBytes(**direct, seed);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "seed " << seed;
  }

  // The canonical spec builds the same model again.
  auto again = MakeModel(model.spec(), inputs, backend.get());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->spec(), model.spec());
  EXPECT_EQ((*again)->Layout(), model.Layout());
}

INSTANTIATE_TEST_SUITE_P(All, ModelRegistrySpecs,
                         ::testing::Values("linear", "mlp", "mlp:16,8", "mlp:7,act=gelu", "mlp:32,act=relu"),
                         SpecParamName());

TEST(ModelRegistry, RefusesAnUnknownKindNamingTheKnownOnes) {
  auto backend = MakeCpuBackend();
  for (const char* spec : {"cnn", "cnn:3,3", "", "MLP:64", "transformer:layers=2"}) {
    auto model = MakeModel(spec, {12, 5, 0}, backend.get());
    ASSERT_FALSE(model.ok()) << spec;
    EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument) << spec;
    const std::string message = model.status().message();
    const std::string kind = std::string(spec).substr(0, std::string(spec).find(':'));
    EXPECT_NE(message.find("unknown model kind '" + kind + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("gpt, linear, mlp"), std::string::npos) << message;
  }
}

TEST(ModelRegistry, PassesOnTheKindsOwnErrors) {
  auto backend = MakeCpuBackend();
  auto bad_width = MakeModel("mlp:0", {12, 5, 0}, backend.get());
  ASSERT_FALSE(bad_width.ok());
  EXPECT_EQ(bad_width.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_width.status().message().find("'mlp:0'"), std::string::npos) << bad_width.status().message();
  auto linear_args = MakeModel("linear:4", {12, 5, 0}, backend.get());
  EXPECT_EQ(linear_args.status().code(), StatusCode::kInvalidArgument);
  auto one_class = MakeModel("mlp", {12, 1, 0}, backend.get());
  ASSERT_FALSE(one_class.ok());
  EXPECT_NE(one_class.status().message().find("2 classes"), std::string::npos) << one_class.status().message();
  EXPECT_EQ(MakeModel("mlp", {12, 5, 0}, nullptr).status().code(), StatusCode::kInvalidArgument);
  // A language model needs token data, and a shape its parser accepts.
  auto gpt_on_features = MakeModel("gpt", {12, 5, 0}, backend.get());
  ASSERT_FALSE(gpt_on_features.ok());
  EXPECT_NE(gpt_on_features.status().message().find("needs token data"), std::string::npos)
      << gpt_on_features.status().message();
  auto odd_heads = MakeModel("gpt:dim=10,heads=4", {0, 0, 256}, backend.get());
  ASSERT_FALSE(odd_heads.ok());
  EXPECT_NE(odd_heads.status().message().find("not a multiple of heads=4"), std::string::npos);
  auto gpt = MakeModel("gpt:layers=2,dim=8,heads=2,ctx=5", {0, 0, 256}, backend.get());
  ASSERT_TRUE(gpt.ok()) << gpt.status().ToString();
  EXPECT_EQ((*gpt)->batch_kind(), BatchKind::kTokens);
  EXPECT_EQ((*gpt)->inputs().vocab_size, 256);
}

TEST(ModelRegistry, InputsOfADataset) {
  data::Dataset d;
  d.dim = 64;
  d.num_classes = 10;
  EXPECT_EQ(InputsOf(d), (ModelInputs{64, 10, 0}));
}

TEST(ModelRegistry, TokenDatasetsGiveTheirVocabularyAndNoMlp) {
  data::Dataset text;
  text.name = "text:t";
  text.kind = data::DatasetKind::kTokens;
  text.n = 3;
  text.vocab_size = data::kByteVocabSize;
  text.tokens = {'a', 'b', 'c'};
  const ModelInputs inputs = InputsOf(text);
  EXPECT_EQ(inputs, (ModelInputs{0, 0, 256}));
  auto backend = MakeCpuBackend();
  for (const char* spec : {"mlp", "linear"}) {
    auto made = MakeModel(spec, inputs, backend.get());
    ASSERT_EQ(made.status().code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(made.status().message().find("holds tokens"), std::string::npos) << made.status().message();
  }
}

class ModelGradient : public ::testing::TestWithParam<const char*> {};

// Smooth models only (GELU, or no activation), so no central difference crosses a ReLU kink.
TEST_P(ModelGradient, ForwardBackwardThroughTheInterfaceMatchesFiniteDifferences) {
  auto backend = MakeCpuBackend();
  const int rows = 5;
  const ModelInputs inputs{6, 4, 0};
  auto made = MakeModel(GetParam(), inputs, backend.get());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Model& model = **made;
  std::vector<float> params = InitBytes(model, 3);
  const std::vector<float> x = UniformVector(rows * inputs.input_dim, -1.5f, 1.5f, 4);
  const std::vector<int32_t> y = {0, 3, 1, 2, 3};
  const Batch batch = Batch::Features(x.data(), y.data(), rows);

  std::vector<float> grads(model.num_params(), std::numeric_limits<float>::quiet_NaN());
  const LossSums sums = model.ForwardBackward(params.data(), batch, grads.data(), 1.0f);
  EXPECT_GT(sums.loss_sum, 0.0);
  // A row is correct when its label is the class of the highest logit, i.e. the label whose
  // cross-entropy is smallest: the count from each row's loss under every label.
  int64_t want_correct = 0;
  for (int r = 0; r < rows; ++r) {
    int32_t best = -1;
    double best_loss = std::numeric_limits<double>::infinity();
    for (int32_t c = 0; c < inputs.num_classes; ++c) {
      const LossSums one = model.ForwardLoss(params.data(), Batch::Features(x.data() + r * inputs.input_dim, &c, 1));
      if (one.loss_sum < best_loss) best_loss = one.loss_sum, best = c;
    }
    want_correct += best == y[r];
  }
  EXPECT_EQ(sums.correct, want_correct);
  for (float g : grads) ASSERT_TRUE(std::isfinite(g)) << "a gradient slot was not written";

  auto mean_loss = [&] { return model.ForwardLoss(params.data(), batch).loss_sum / rows; };
  EXPECT_NEAR(mean_loss(), sums.loss_sum / rows, 1e-12);
  EXPECT_EQ(model.ForwardLoss(params.data(), batch).correct, sums.correct);
  EXPECT_TRUE(GradientMatches(mean_loss, &params, grads, 1e-3f, 1e-2, 1e-4));

  // loss_scale multiplies the gradient (a power of two: exactly) and leaves the sums alone.
  std::vector<float> scaled(model.num_params());
  const LossSums scaled_sums = model.ForwardBackward(params.data(), batch, scaled.data(), 8.0f);
  EXPECT_EQ(scaled_sums.loss_sum, sums.loss_sum);
  for (size_t i = 0; i < grads.size(); ++i) ASSERT_EQ(scaled[i], 8.0f * grads[i]) << i;

  // An empty batch: zero gradient, zero sums.
  const LossSums empty =
      model.ForwardBackward(params.data(), Batch::Features(x.data(), y.data(), 0), scaled.data(), 1.0f);
  EXPECT_EQ(empty.loss_sum, 0.0);
  EXPECT_EQ(empty.correct, 0);
  for (float g : scaled) ASSERT_EQ(g, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(All, ModelGradient, ::testing::Values("linear", "mlp:5,act=gelu", "mlp:5,3,act=gelu"),
                         SpecParamName());

TEST(ModelInterface, MatchesMlpsRawArrayPassesBitForBit) {
  auto backend = MakeCpuBackend();
  auto mlp = Mlp::Create(*ParseModelSpec("mlp:9,7"), 6, 4, backend.get());
  ASSERT_TRUE(mlp.ok());
  Model& model = **mlp;
  const std::vector<float> params = InitBytes(model, 5);
  const std::vector<float> x = UniformVector(8 * 6, -1.0f, 1.0f, 6);
  const std::vector<int32_t> y = {0, 1, 2, 3, 3, 2, 1, 0};
  std::vector<float> a(model.num_params()), b(model.num_params());
  const LossSums sums = model.ForwardBackward(params.data(), Batch::Features(x.data(), y.data(), 8), a.data(), 1.0f);
  double loss_sum = 0.0;
  int64_t correct = -1;
  (*mlp)->ForwardBackward(params.data(), x.data(), y.data(), 8, b.data(), &loss_sum, &correct);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(sums.loss_sum, loss_sum);
  EXPECT_EQ(sums.correct, correct);
}

}  // namespace
}  // namespace shoal::nn
