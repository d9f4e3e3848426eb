// The RDP accountant against golden values from Opacus and Google's dp-accounting
// (tests/data/rdp_ref.json, written by tests/data/gen_rdp_ref.py), and its own invariants.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "privacy/dp/rdp.h"

namespace shoal::privacy {
namespace {

double RelErr(double got, double want) { return std::fabs(got - want) / std::max(std::fabs(want), 1e-300); }

// Opacus's docstring example: two mechanisms composed, orders 2..32.
TEST(Rdp, OpacusDocstringExample) {
  std::vector<double> orders;
  for (int a = 2; a <= 32; ++a) orders.push_back(a);
  RdpAccountant acc(orders);
  ASSERT_TRUE(acc.Compose(1e-5, 1.0, 10).ok());
  ASSERT_TRUE(acc.Compose(1e-4, 3.0, 4).ok());
  auto eps = acc.Spent(1e-5);
  ASSERT_TRUE(eps.ok());
  EXPECT_NEAR(eps->epsilon, 0.336, 0.0005);
  EXPECT_EQ(eps->order, 23.0);
}

TEST(Rdp, MatchesOpacusAndDpAccountingOnGoldenCases) {
  std::ifstream in(std::string(SHOAL_TEST_DATA_DIR) + "/rdp_ref.json");
  ASSERT_TRUE(in) << "tests/data/rdp_ref.json";
  const auto ref = nlohmann::json::parse(in);
  ASSERT_GE(ref["cases"].size(), 21u);
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    RdpAccountant acc(c["orders"].get<std::vector<double>>());
    for (const auto& p : c["parts"])
      ASSERT_TRUE(acc.Compose(p[0].get<double>(), p[1].get<double>(), p[2].get<uint64_t>()).ok());
    const auto want_rdp = c["rdp"].get<std::vector<double>>();
    ASSERT_EQ(acc.rdp().size(), want_rdp.size());
    // 1e-6 relative, with a floor for RDP values near 0: log A_alpha is the log of a sum near
    // 1, so both implementations carry ~1e-15 of absolute rounding per round (q = 0.001 at
    // order 1.1 gives 1e-9 per round, where that is 1e-6 relative).
    uint64_t rounds = 0;
    for (const auto& p : c["parts"]) rounds += p[2].get<uint64_t>();
    for (size_t i = 0; i < want_rdp.size(); ++i)
      EXPECT_LE(std::fabs(acc.rdp()[i] - want_rdp[i]), 1e-6 * std::fabs(want_rdp[i]) + 1e-14 * rounds)
          << "order " << acc.orders()[i] << ": " << acc.rdp()[i] << " vs " << want_rdp[i];
    auto eps = acc.Spent(c["delta"].get<double>());
    ASSERT_TRUE(eps.ok());
    EXPECT_LE(RelErr(eps->epsilon, c["epsilon"].get<double>()), 1e-6) << eps->epsilon;
    EXPECT_EQ(eps->order, c["order"].get<double>());
    if (c.contains("dp_accounting_epsilon")) {
      EXPECT_LE(RelErr(eps->epsilon, c["dp_accounting_epsilon"].get<double>()), 1e-6);
    }
  }
}

// Without sampling the Gaussian mechanism's RDP is alpha / (2 z^2); with q = 0 nothing leaks.
TEST(Rdp, ClosedFormsAndMonotonicity) {
  EXPECT_DOUBLE_EQ(SampledGaussianRdp(1.0, 2.0, 8.0), 8.0 / 8.0);
  EXPECT_EQ(SampledGaussianRdp(0.0, 2.0, 8.0), 0.0);
  EXPECT_TRUE(std::isnan(SampledGaussianRdp(1.5, 2.0, 8.0)));
  EXPECT_TRUE(std::isnan(SampledGaussianRdp(0.1, 0.0, 8.0)));
  // More noise or less sampling: less privacy loss, at integer and fractional orders alike.
  for (double a : {1.5, 2.0, 7.3, 32.0}) {
    EXPECT_LT(SampledGaussianRdp(0.1, 2.0, a), SampledGaussianRdp(0.1, 1.0, a)) << a;
    EXPECT_LT(SampledGaussianRdp(0.05, 1.0, a), SampledGaussianRdp(0.1, 1.0, a)) << a;
  }
  // Fractional orders sit between their integer neighbours.
  const double r2 = SampledGaussianRdp(0.1, 1.0, 2.0), r3 = SampledGaussianRdp(0.1, 1.0, 3.0);
  const double r25 = SampledGaussianRdp(0.1, 1.0, 2.5);
  EXPECT_GT(r25, r2);
  EXPECT_LT(r25, r3);
}

TEST(Rdp, SpentAfterLeavesTheAccountantAndSaveLoadIsExact) {
  RdpAccountant acc;
  ASSERT_TRUE(acc.Compose(0.1, 1.1, 7).ok());
  const auto before = acc.rdp();
  auto next = acc.SpentAfter(0.1, 1.1, 1, 1e-5);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(acc.rdp(), before);
  EXPECT_GT(next->epsilon, acc.Spent(1e-5)->epsilon);
  RdpAccountant loaded;
  ASSERT_TRUE(loaded.Load(acc.Save()).ok());
  EXPECT_EQ(loaded.rdp(), acc.rdp());
  EXPECT_EQ(loaded.rounds(), 7u);
  EXPECT_FALSE(loaded.Load("rdp1 3 2 0x1p+0 0x0p+0").ok()) << "another order set";
  EXPECT_FALSE(loaded.Load("garbage").ok());
  EXPECT_EQ(loaded.rdp(), acc.rdp()) << "a refused load changes nothing";
  EXPECT_FALSE(acc.Spent(0.0).ok());
  EXPECT_FALSE(acc.Compose(0.1, -1.0).ok());
}

TEST(Rdp, NoiseMultiplierForATargetIsTheSmallestThatReachesIt) {
  for (double target : {1.0, 3.0, 8.0}) {
    auto z = NoiseMultiplierFor(target, 1e-5, 0.1, 50);
    ASSERT_TRUE(z.ok()) << z.status().ToString();
    RdpAccountant at, below;
    ASSERT_TRUE(at.Compose(0.1, *z, 50).ok());
    ASSERT_TRUE(below.Compose(0.1, *z * (1 - 3e-4), 50).ok());
    EXPECT_LE(at.Spent(1e-5)->epsilon, target);
    EXPECT_GT(below.Spent(1e-5)->epsilon, target) << "z = " << *z;
  }
  EXPECT_FALSE(NoiseMultiplierFor(1.0, 1e-5, 0.1, 0).ok());
  EXPECT_FALSE(NoiseMultiplierFor(-1.0, 1e-5, 0.1, 10).ok());
}

}  // namespace
}  // namespace shoal::privacy
