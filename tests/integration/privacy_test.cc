// Differential privacy end to end: real aggregator and client processes on 127.0.0.1, and
// shoal-sim's thousand clients, judged by the metrics they write.
#include <gtest/gtest.h>

#include <set>

#include "harness.h"
#include "privacy/dp/rdp.h"

namespace shoal::testing {
namespace {

using std::chrono::seconds;

double EpsilonAfter(double q, double z, uint64_t rounds, double delta = 1e-5) {
  privacy::RdpAccountant a;
  EXPECT_TRUE(a.Compose(q, z, rounds).ok());
  return a.Spent(delta)->epsilon;
}

// Three client processes under central DP: the model still learns, every round reports the
// accountant's epsilon, and a restart with --resume continues the accountant from the
// checkpoint instead of starting it over.
TEST(Privacy, CentralDpOverRealProcessesLearnsAndResumesTheAccountant) {
  const std::string dir = TempDir("dp-central");
  const int port = FreePort();
  auto args = AggregatorArgs(port, 3, 3, dir + "/run.jsonl");
  for (auto [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--dp-clip", "2"}, {"--dp-noise-multiplier", "0.05"}, {"--checkpoint-dir", dir + "/ckpt"}})
    SetFlag(args, flag, value);
  {
    Process agg("shoal-aggregator", args, dir + "/agg1", OneThreadEnv());
    auto clients = StartClients(port, 3, dir + "/a");
    ASSERT_EQ(agg.Wait(seconds(120)), 0) << agg.Stderr();
    ExpectAllExitZero(clients);
    EXPECT_NE(agg.Stderr().find("differential privacy: clip 2"), std::string::npos) << agg.Stderr();
  }
  SetFlag(args, "--rounds", "5");
  args.push_back("--resume");
  Process agg("shoal-aggregator", args, dir + "/agg2", OneThreadEnv());
  auto clients = StartClients(port, 3, dir + "/b");
  ASSERT_EQ(agg.Wait(seconds(120)), 0) << agg.Stderr();
  ExpectAllExitZero(clients);
  auto lines = ReadJsonLines(dir + "/run.jsonl");
  ASSERT_EQ(lines.size(), 5u);
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_TRUE(lines[i].contains("epsilon")) << lines[i].dump();
    EXPECT_NEAR(lines[i]["epsilon"].get<double>(), EpsilonAfter(1.0, 0.05, i + 1), 1e-9) << "round " << i + 1;
    EXPECT_EQ(lines[i]["dp_clip"], 2.0);
    EXPECT_EQ(lines[i]["clients_selected"], 3) << "--fraction 1 samples everyone";
  }
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), 0.8) << lines.back().dump();
}

struct SimResult {
  int exit_code = -1;
  std::string err;
  std::vector<nlohmann::json> rounds;
};

SimResult Sim(const std::string& name, std::vector<std::string> extra) {
  const std::string dir = TempDir(name);
  std::vector<std::string> args = {"--clients", "1000", "--rounds", "10", "--fraction", "0.1", "--dataset", "digits",
                                   "--lr", "0.1", "--local-epochs", "5", "--seed", "3", "--threads", "2",
                                   "--metrics-out", dir + "/m.jsonl", "--log-level", "warn"};
  for (size_t i = 0; i + 1 < extra.size(); i += 2) SetFlag(args, extra[i], extra[i + 1]);
  Process sim(BinDir() + "/shoal-sim", args, dir + "/sim", OneThreadEnv());
  SimResult r;
  r.exit_code = sim.Wait(seconds(120));
  r.err = sim.Stderr();
  if (r.exit_code == 0) r.rounds = ReadJsonLines(dir + "/m.jsonl");
  return r;
}

// A thousand clients, Poisson-sampled at 10%: the sample size varies round to round, epsilon
// follows the accountant, the model still learns at epsilon ~3.4, and a budget of 2.5 stops
// the run after the last round that fits it, with the numbers in the message.
TEST(Privacy, SimPoissonSamplingEpsilonAndBudget) {
  SimResult plain = Sim("dp-sim-plain", {});
  SimResult dp = Sim("dp-sim", {"--dp-clip", "1", "--dp-noise-multiplier", "1"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  ASSERT_EQ(dp.rounds.size(), 10u);
  std::set<int> sizes;
  for (size_t i = 0; i < dp.rounds.size(); ++i) {
    sizes.insert(dp.rounds[i]["clients_selected"].get<int>());
    EXPECT_NEAR(dp.rounds[i]["epsilon"].get<double>(), EpsilonAfter(0.1, 1.0, i + 1), 1e-9);
  }
  EXPECT_GT(sizes.size(), 1u) << "Poisson sampling gives samples of varying size";
  const double acc_plain = plain.rounds.back()["test_accuracy"], acc_dp = dp.rounds.back()["test_accuracy"];
  std::printf("digits, 1000 clients, 10 rounds: accuracy %.4f without DP, %.4f with DP (epsilon %.3f)\n", acc_plain,
              acc_dp, dp.rounds.back()["epsilon"].get<double>());
  EXPECT_GT(acc_dp, 0.6);

  SimResult budget = Sim("dp-sim-budget", {"--dp-clip", "1", "--dp-noise-multiplier", "1", "--dp-epsilon-budget", "2.5"});
  ASSERT_EQ(budget.exit_code, 0) << budget.err;
  EXPECT_EQ(budget.rounds.size(), 2u) << "epsilon is 2.41 after 2 rounds and 2.61 after 3";
  EXPECT_NE(budget.err.find("round 3 would take epsilon from 2.413 to 2.607, past --dp-epsilon-budget 2.5"),
            std::string::npos)
      << budget.err;
}

TEST(Privacy, BadPrivacyFlagsAreRefusedAtStart) {
  for (auto flags : std::vector<std::vector<std::string>>{{"--dp-noise-multiplier", "1"},
                                                           {"--dp-clip", "1"},
                                                           {"--dp-clip", "1", "--dp-target-epsilon", "1", "--rounds", "0"},
                                                           {"--dp-clip", "1", "--dp-noise-multiplier", "1", "--dp-delta", "2"}}) {
    SimResult r = Sim("dp-bad", flags);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(r.err.find("--dp-") != std::string::npos || r.err.find("--rounds") != std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace shoal::testing
