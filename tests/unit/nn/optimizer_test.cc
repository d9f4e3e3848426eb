// SGD and AdamW against trajectories recorded from torch.optim (tests/data/optim_ref.json,
// written by tests/data/gen_optim_ref.py), plus config validation.
#include "nn/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "nn/adamw.h"
#include "nn/sgd.h"

namespace shoal::nn {
namespace {

using nlohmann::json;

const json& Reference() {
  static const json ref = [] {
    const std::string path = std::string(SHOAL_TEST_DATA_DIR) + "/optim_ref.json";
    std::ifstream in(path);
    if (!in) {
      ADD_FAILURE() << "cannot open " << path << " (regenerate with /usr/bin/python3 tests/data/gen_optim_ref.py)";
      return json::object({{"cases", json::array()}});
    }
    return json::parse(in);
  }();
  return ref;
}

std::vector<float> Floats(const json& j) {
  std::vector<float> v;
  for (const auto& x : j) v.push_back(static_cast<float>(x.get<double>()));
  return v;
}

OptimizerConfig ConfigOf(const json& c) {
  OptimizerConfig config;
  config.name = c.at("name").get<std::string>();
  config.learning_rate = c.at("learning_rate").get<float>();
  config.momentum = c.at("momentum").get<float>();
  config.nesterov = c.at("nesterov").get<bool>();
  config.weight_decay = c.at("weight_decay").get<float>();
  config.beta1 = c.at("beta1").get<float>();
  config.beta2 = c.at("beta2").get<float>();
  config.eps = c.at("eps").get<float>();
  return config;
}

// Replays the case's gradients through a fresh optimizer (or `reuse`, already built) and
// compares every step with PyTorch to 1e-6 relative.
void ReplayCase(const json& c, Optimizer* reuse = nullptr) {
  auto backend = MakeCpuBackend();
  std::vector<float> w = Floats(c.at("w0"));
  std::unique_ptr<Optimizer> owned;
  Optimizer* opt = reuse;
  if (opt == nullptr) {
    auto made = MakeOptimizer(ConfigOf(c.at("config")), w.size(), backend.get());
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    owned = std::move(made).value();
    opt = owned.get();
  }
  const json& grads = c.at("grads");
  const json& expected = c.at("w");
  ASSERT_EQ(grads.size(), expected.size());
  ASSERT_GE(grads.size(), 5u);
  for (size_t step = 0; step < grads.size(); ++step) {
    const std::vector<float> g = Floats(grads[step]);
    opt->Step(w.data(), g.data());
    const std::vector<float> want = Floats(expected[step]);
    ASSERT_EQ(want.size(), w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      const double tol = 1e-6 * std::fabs(want[i]) + 1e-8;
      EXPECT_NEAR(w[i], want[i], tol) << c.at("name").get<std::string>() << " step " << step + 1 << " index " << i;
    }
  }
  EXPECT_EQ(opt->steps(), static_cast<int64_t>(grads.size()));
}

TEST(OptimizerReference, FileCoversEveryFeature) {
  std::set<std::string> names;
  for (const auto& c : Reference().at("cases")) names.insert(c.at("name").get<std::string>());
  for (const char* needed : {"sgd_plain", "sgd_momentum", "sgd_nesterov", "sgd_weight_decay", "adamw_weight_decay"})
    EXPECT_TRUE(names.count(needed)) << "optim_ref.json lacks case " << needed;
}

class OptimizerMatchesTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimizerMatchesTorch, EveryStep) {
  for (const auto& c : Reference().at("cases"))
    if (c.at("name") == GetParam()) return ReplayCase(c);
  FAIL() << "no case " << GetParam() << " in optim_ref.json";
}

INSTANTIATE_TEST_SUITE_P(All, OptimizerMatchesTorch,
                         ::testing::Values("sgd_plain", "sgd_momentum", "sgd_nesterov", "sgd_weight_decay",
                                           "sgd_momentum_weight_decay", "sgd_nesterov_weight_decay", "adamw",
                                           "adamw_weight_decay", "adamw_betas_eps"));

// After Reset() an optimizer must behave exactly like a fresh one: replaying the same case
// twice through one object matches PyTorch both times (stale momentum/moments would not).
TEST(Optimizer, ResetForgetsAllState) {
  auto backend = MakeCpuBackend();
  for (const char* name : {"sgd_momentum", "sgd_nesterov_weight_decay", "adamw_weight_decay"}) {
    SCOPED_TRACE(name);
    for (const auto& c : Reference().at("cases")) {
      if (c.at("name") != name) continue;
      auto opt = MakeOptimizer(ConfigOf(c.at("config")), Floats(c.at("w0")).size(), backend.get());
      ASSERT_TRUE(opt.ok());
      ReplayCase(c, opt->get());
      (*opt)->Reset();
      EXPECT_EQ((*opt)->steps(), 0);
      ReplayCase(c, opt->get());
    }
  }
}

// A copy restored from SaveState continues bit for bit like the original (what a peer joining
// a swarm relies on), and a state of the wrong size is refused.
TEST(Optimizer, SavedStateContinuesIdentically) {
  auto backend = MakeCpuBackend();
  for (const char* name : {"sgd", "sgd_momentum", "adamw"}) {
    SCOPED_TRACE(name);
    OptimizerConfig config;
    config.name = std::string(name) == "adamw" ? "adamw" : "sgd";
    config.learning_rate = 0.1f;
    if (std::string(name) == "sgd_momentum") config.momentum = 0.9f;
    const size_t n = 7;
    auto a = MakeOptimizer(config, n, backend.get()).value();
    auto b = MakeOptimizer(config, n, backend.get()).value();
    std::vector<float> wa(n), g(n);
    for (size_t i = 0; i < n; ++i) {
      wa[i] = 0.1f * static_cast<float>(i);
      g[i] = 0.3f - 0.05f * static_cast<float>(i);
    }
    for (int s = 0; s < 3; ++s) a->Step(wa.data(), g.data());
    std::vector<float> wb = wa;
    ASSERT_TRUE(b->LoadState(a->SaveState()).ok());
    EXPECT_EQ(b->steps(), 3);
    for (int s = 0; s < 3; ++s) {
      a->Step(wa.data(), g.data());
      b->Step(wb.data(), g.data());
    }
    EXPECT_EQ(wa, wb);
    EXPECT_FALSE(b->LoadState(std::vector<float>(3)).ok());
  }
}

TEST(Optimizer, LearningRateCanChangeBetweenSteps) {
  auto backend = MakeCpuBackend();
  OptimizerConfig config;
  config.learning_rate = 0.5f;
  auto opt = MakeOptimizer(config, 2, backend.get());
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ((*opt)->name(), "sgd");
  EXPECT_EQ((*opt)->size(), 2u);
  std::vector<float> w = {1.0f, -1.0f};
  const std::vector<float> g = {1.0f, 2.0f};
  (*opt)->Step(w.data(), g.data());
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], -2.0f);
  (*opt)->set_learning_rate(0.25f);
  EXPECT_FLOAT_EQ((*opt)->learning_rate(), 0.25f);
  (*opt)->Step(w.data(), g.data());
  EXPECT_FLOAT_EQ(w[0], 0.25f);
  EXPECT_FLOAT_EQ(w[1], -2.5f);
}

struct BadConfig {
  const char* label;
  OptimizerConfig config;
  const char* must_mention;
};
void PrintTo(const BadConfig& b, std::ostream* os) { *os << b.label; }

BadConfig Bad(const char* label, const char* must_mention, void (*edit)(OptimizerConfig&)) {
  BadConfig b{label, OptimizerConfig{}, must_mention};
  edit(b.config);
  return b;
}

class OptimizerConfigErrors : public ::testing::TestWithParam<BadConfig> {};

TEST_P(OptimizerConfigErrors, AreInvalidArgumentsNamingTheField) {
  auto backend = MakeCpuBackend();
  const BadConfig& bad = GetParam();
  const Status direct = ValidateOptimizerConfig(bad.config);
  EXPECT_EQ(direct.code(), StatusCode::kInvalidArgument) << direct.ToString();
  auto made = MakeOptimizer(bad.config, 10, backend.get());
  ASSERT_FALSE(made.ok()) << bad.label;
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find(bad.must_mention), std::string::npos) << made.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    All, OptimizerConfigErrors,
    ::testing::Values(
        Bad("unknown_name", "unknown optimizer 'adam'", [](OptimizerConfig& c) { c.name = "adam"; }),
        Bad("nesterov_without_momentum", "nesterov requires momentum", [](OptimizerConfig& c) { c.nesterov = true; }),
        Bad("negative_lr", "learning rate must be finite and >= 0, got -0.1",
            [](OptimizerConfig& c) { c.learning_rate = -0.1f; }),
        Bad("nan_lr", "learning rate", [](OptimizerConfig& c) { c.learning_rate = std::nanf(""); }),
        Bad("negative_momentum", "momentum must be", [](OptimizerConfig& c) { c.momentum = -0.5f; }),
        Bad("negative_weight_decay", "weight_decay must be", [](OptimizerConfig& c) { c.weight_decay = -1e-4f; }),
        Bad("adamw_beta1_one", "beta1 must be in [0, 1), got 1",
            [](OptimizerConfig& c) {
              c.name = "adamw";
              c.beta1 = 1.0f;
            }),
        Bad("adamw_beta2_negative", "beta2",
            [](OptimizerConfig& c) {
              c.name = "adamw";
              c.beta2 = -0.1f;
            }),
        Bad("adamw_negative_eps", "eps must be",
            [](OptimizerConfig& c) {
              c.name = "adamw";
              c.eps = -1e-8f;
            })),
    [](const auto& param_info) { return std::string(param_info.param.label); });

TEST(Optimizer, ValidConfigsAndNullBackend) {
  OptimizerConfig sgd;
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  EXPECT_TRUE(ValidateOptimizerConfig(sgd).ok());
  OptimizerConfig adamw;
  adamw.name = "adamw";
  adamw.learning_rate = 0.0f;  // a zero learning rate is legal (PyTorch allows it)
  EXPECT_TRUE(ValidateOptimizerConfig(adamw).ok());
  EXPECT_FALSE(MakeOptimizer(adamw, 4, nullptr).ok());
}

}  // namespace
}  // namespace shoal::nn
