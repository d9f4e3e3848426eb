// ParameterArena: layout, views and offsets, Assign.

#include "shoal/arena.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace shoal {
namespace {

std::vector<TensorSpec> MlpLayout() {
  return {{"fc0.weight", {4, 3}}, {"fc0.bias", {3}}, {"fc1.weight", {3, 2}}, {"fc1.bias", {2}}};
}

TEST(ArenaTest, LayoutSizeAndString) {
  EXPECT_EQ(LayoutSize(MlpLayout()), 12u + 3u + 6u + 2u);
  EXPECT_EQ(LayoutToString(MlpLayout()), "fc0.weight[4,3] fc0.bias[3] fc1.weight[3,2] fc1.bias[2]");
  EXPECT_EQ(LayoutSize({}), 0u);
  EXPECT_EQ((TensorSpec{"scalar", {}}).numel(), 1);
  EXPECT_EQ((TensorSpec{"empty", {5, 0}}).numel(), 0);
}

TEST(ArenaTest, ViewsArePackedInOrder) {
  ParameterArena a(MlpLayout());
  ASSERT_EQ(a.num_tensors(), 4u);
  EXPECT_EQ(a.size(), 23u);
  const size_t offsets[] = {0, 12, 15, 21};
  const size_t sizes[] = {12, 3, 6, 2};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a.view(i).offset, offsets[i]) << i;
    EXPECT_EQ(a.view(i).size, sizes[i]) << i;
    EXPECT_EQ(a.tensor(i).data(), a.data() + offsets[i]) << i;
    EXPECT_EQ(a.tensor(i).size(), sizes[i]) << i;
  }
  // Zero-filled on construction.
  for (float v : a.span()) EXPECT_EQ(v, 0.0f);
}

TEST(ArenaTest, WritesThroughViewsLandInTheFlatBuffer) {
  ParameterArena a(MlpLayout());
  a.tensor(1)[2] = 7.5f;  // fc0.bias[2]
  EXPECT_EQ(a.data()[12 + 2], 7.5f);
  a.Fill(1.25f);
  for (float v : a.tensor(3)) EXPECT_EQ(v, 1.25f);
}

TEST(ArenaTest, AddAppends) {
  ParameterArena a;
  EXPECT_EQ(a.Add("w", {2, 2}), 0u);
  EXPECT_EQ(a.Add("b", {2}), 1u);
  EXPECT_EQ(a.size(), 6u);
  EXPECT_EQ(a.view(1).offset, 4u);
  EXPECT_TRUE(a.SameLayout(ParameterArena({{"w", {2, 2}}, {"b", {2}}})));
}

TEST(ArenaTest, FindByName) {
  ParameterArena a(MlpLayout());
  auto i = a.Find("fc1.weight");
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(*i, 2u);
  auto missing = a.Find("fc2.weight");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("fc2.weight"), std::string::npos);
}

TEST(ArenaTest, LayoutRoundTripsAndSameLayoutCompares) {
  ParameterArena a(MlpLayout());
  EXPECT_EQ(a.Layout(), MlpLayout());
  EXPECT_TRUE(a.SameLayout(ParameterArena(MlpLayout())));
  auto other = MlpLayout();
  other[1].shape = {4};
  EXPECT_FALSE(a.SameLayout(ParameterArena(other)));
  other = MlpLayout();
  other[0].name = "fc0.w";
  EXPECT_FALSE(a.SameLayout(ParameterArena(other)));
  other = MlpLayout();
  other.pop_back();
  EXPECT_FALSE(a.SameLayout(ParameterArena(other)));
}

TEST(ArenaTest, AssignCopiesOrRejectsWrongSize) {
  ParameterArena a(MlpLayout());
  std::vector<float> values(a.size());
  std::iota(values.begin(), values.end(), 0.0f);
  ASSERT_TRUE(a.Assign(values).ok());
  EXPECT_EQ(a.tensor(2)[0], 15.0f);
  EXPECT_EQ(a.tensor(3)[1], 22.0f);

  std::vector<float> short_values(a.size() - 1, 9.0f);
  Status s = a.Assign(short_values);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("23"), std::string::npos) << s.ToString();
  EXPECT_EQ(a.tensor(0)[0], 0.0f) << "a failed Assign must not modify the arena";

  std::vector<float> long_values(a.size() + 1, 9.0f);
  EXPECT_FALSE(a.Assign(long_values).ok());
}

}  // namespace
}  // namespace shoal
