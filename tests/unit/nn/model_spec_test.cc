#include "nn/model_spec.h"

#include <gtest/gtest.h>

namespace shoal::nn {
namespace {

TEST(ModelSpec, ParsesTheDocumentedForms) {
  auto mlp = ParseModelSpec("mlp");
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  EXPECT_EQ(mlp->kind, "mlp");
  EXPECT_EQ(mlp->hidden, std::vector<int>{64});
  EXPECT_EQ(mlp->activation, "relu");

  auto two = ParseModelSpec("mlp:128,64");
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->hidden, (std::vector<int>{128, 64}));
  EXPECT_EQ(two->activation, "relu");

  auto gelu = ParseModelSpec("mlp:128,64,act=gelu");
  ASSERT_TRUE(gelu.ok()) << gelu.status().ToString();
  EXPECT_EQ(gelu->hidden, (std::vector<int>{128, 64}));
  EXPECT_EQ(gelu->activation, "gelu");

  auto act_only = ParseModelSpec("mlp:act=gelu");
  ASSERT_TRUE(act_only.ok()) << act_only.status().ToString();
  EXPECT_EQ(act_only->hidden, std::vector<int>{64});
  EXPECT_EQ(act_only->activation, "gelu");

  auto linear = ParseModelSpec("linear");
  ASSERT_TRUE(linear.ok()) << linear.status().ToString();
  EXPECT_EQ(linear->kind, "linear");
  EXPECT_TRUE(linear->hidden.empty());
}

TEST(ModelSpec, CanonicalStringRoundTrips) {
  EXPECT_EQ(ModelSpecToString(*ParseModelSpec("mlp")), "mlp:64");
  EXPECT_EQ(ModelSpecToString(*ParseModelSpec("mlp:128,64")), "mlp:128,64");
  EXPECT_EQ(ModelSpecToString(*ParseModelSpec("mlp:128,64,act=gelu")), "mlp:128,64,act=gelu");
  EXPECT_EQ(ModelSpecToString(*ParseModelSpec("mlp:32,act=relu")), "mlp:32");
  EXPECT_EQ(ModelSpecToString(*ParseModelSpec("linear")), "linear");
  for (const char* text : {"mlp", "mlp:7", "mlp:1,2,3,act=gelu", "linear"}) {
    ModelSpec spec = *ParseModelSpec(text);
    auto again = ParseModelSpec(ModelSpecToString(spec));
    ASSERT_TRUE(again.ok()) << text;
    EXPECT_EQ(*again, spec) << text;
  }
}

struct BadSpec {
  const char* text;
  const char* must_mention;  // a fragment the error message must contain
};
void PrintTo(const BadSpec& b, std::ostream* os) { *os << "'" << b.text << "'"; }

class ModelSpecErrors : public ::testing::TestWithParam<BadSpec> {};

TEST_P(ModelSpecErrors, AreInvalidArgumentsThatQuoteTheSpecAndTheProblem) {
  auto parsed = ParseModelSpec(GetParam().text);
  ASSERT_FALSE(parsed.ok()) << GetParam().text << " parsed";
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  const std::string message = parsed.status().message();
  EXPECT_NE(message.find("'" + std::string(GetParam().text) + "'"), std::string::npos) << message;
  EXPECT_NE(message.find(GetParam().must_mention), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    All, ModelSpecErrors,
    ::testing::Values(BadSpec{"mlp:0", "positive integer, got '0'"}, BadSpec{"mlp:a", "positive integer, got 'a'"},
                      BadSpec{"mlp:-4", "positive integer, got '-4'"}, BadSpec{"mlp:64x", "got '64x'"},
                      BadSpec{"mlp: 64", "got ' 64'"}, BadSpec{"mlp:99999999999", "too large"},
                      BadSpec{"mlp:2000000", "too large"}, BadSpec{"cnn", "unknown model kind 'cnn'"},
                      BadSpec{"", "unknown model kind ''"}, BadSpec{"MLP", "unknown model kind 'MLP'"},
                      BadSpec{"mlp:", "expected hidden widths"}, BadSpec{"mlp:64,,32", "empty item"},
                      BadSpec{"mlp:64,", "empty item"}, BadSpec{"mlp:64,act=tanh", "unknown activation 'tanh'"},
                      BadSpec{"mlp:64,act=gelu,act=relu", "act= given twice"},
                      BadSpec{"mlp:act=gelu,64", "before act="}, BadSpec{"mlp:64,drop=0.1", "unknown option 'drop'"},
                      BadSpec{"linear:10", "takes no options"}));

}  // namespace
}  // namespace shoal::nn
