// shoal-sim as a user runs it: 1,000 virtual clients in one process, the real aggregator and
// client code over the in-process network, judged by the metrics it writes.
#include <gtest/gtest.h>

#include "harness.h"

namespace shoal::testing {
namespace {

using std::chrono::seconds;

struct SimRun {
  int exit_code = -1;
  std::string stdout_text, stderr_text;
  std::vector<nlohmann::json> rounds;
};

SimRun RunSim(const std::string& name, const std::vector<std::string>& extra) {
  const std::string dir = TempDir(name);
  const std::string metrics = dir + "/metrics.jsonl";
  std::vector<std::string> args = {"--clients", "1000", "--rounds", "5", "--fraction", "0.1", "--dataset", "digits",
                                   "--lr", "0.1", "--local-epochs", "5", "--seed", "3", "--threads", "2",
                                   "--metrics-out", metrics, "--log-level", "error"};
  for (size_t i = 0; i + 1 < extra.size(); i += 2) {
    if (extra[i + 1].empty())
      args.push_back(extra[i]);  // a switch
    else
      SetFlag(args, extra[i], extra[i + 1]);
  }
  Process sim(BinDir() + "/shoal-sim", args, dir + "/sim", OneThreadEnv());
  SimRun r;
  r.exit_code = sim.Wait(std::chrono::milliseconds(120000));
  r.stdout_text = sim.Stdout();
  r.stderr_text = sim.Stderr();
  if (r.exit_code == 0) r.rounds = ReadJsonLines(metrics);
  return r;
}

TEST(Sim, AThousandClientsTrainAndEveryRoundSelectsItsShare) {
  SimRun r = RunSim("sim-1000", {});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_EQ(r.rounds.size(), 5u);
  for (const auto& line : r.rounds) {
    EXPECT_EQ(line["clients_registered"], 1000) << line.dump();
    EXPECT_EQ(line["clients_selected"], 100) << line.dump();
    EXPECT_EQ(line["clients_reported"], 100) << line.dump();
    EXPECT_TRUE(line["model_updated"].get<bool>());
  }
  // The model learns: digits from 10% (chance) to 0.83 in 5 rounds.
  EXPECT_GT(r.rounds.back()["test_accuracy"].get<double>(), 0.75);
  EXPECT_LT(r.rounds.back()["test_loss"].get<double>(), r.rounds.front()["test_loss"].get<double>());
  EXPECT_NE(r.stdout_text.find("shoal-sim: 1000 clients"), std::string::npos) << r.stdout_text;
}

// Same seed, same federation: the same model after every round, though the updates of each
// round arrive in a different order each run (two driver threads, real time).
TEST(Sim, TheSameSeedGivesTheSameModelHashes) {
  SimRun a = RunSim("sim-det-a", {"--clients", "300", "--fraction", "0.2"});
  SimRun b = RunSim("sim-det-b", {"--clients", "300", "--fraction", "0.2", "--latency-ms", "2", "--latency-spread", "1"});
  ASSERT_EQ(a.exit_code, 0) << a.stderr_text;
  ASSERT_EQ(b.exit_code, 0) << b.stderr_text;
  ASSERT_EQ(a.rounds.size(), 5u) << "two empty files would compare equal";
  ASSERT_EQ(b.rounds.size(), 5u);
  for (size_t i = 0; i < a.rounds.size(); ++i) EXPECT_EQ(a.rounds[i]["model_hash"], b.rounds[i]["model_hash"]) << i;
}

// Churn: a fifth of each round's clients die mid-round; the rounds close without them (after
// the heartbeat timeout), the dead come back, and training goes on.
TEST(Sim, ChurnedClientsAreDroppedAndComeBack) {
  SimRun r = RunSim("sim-churn", {"--churn", "0.2", "--churn-restart", "300", "--heartbeat-interval", "0.2",
                                  "--heartbeat-timeout", "1", "--round-timeout", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_EQ(r.rounds.size(), 5u);
  uint64_t dropped = 0;
  for (const auto& line : r.rounds) {
    dropped += line["clients_dropped"].get<uint64_t>();
    EXPECT_EQ(line["clients_reported"].get<uint64_t>() + line["clients_dropped"].get<uint64_t>(),
              line["clients_selected"].get<uint64_t>());
    EXPECT_GE(line["clients_registered"].get<uint64_t>(), 900u) << "the dead must come back";
  }
  // 500 selections at 20%: 100 expected; fewer than 60 has probability < 1e-5.
  EXPECT_GT(dropped, 60u);
  EXPECT_LT(dropped, 140u);
  EXPECT_GT(r.rounds.back()["test_accuracy"].get<double>(), 0.75);  // 0.825 here (0.83 without churn)
  EXPECT_NE(r.stdout_text.find("churn deaths"), std::string::npos);
}

// Churn at each point of a secure round (--churn-at): clients that die after sharing their
// keys are the dropouts SecAgg+ recovers from (their pairwise masks are unmasked from their
// neighbours' shares), in every round; clients that die at unmask leave a sum that the
// others still unmask. Before --churn-at, every death came at the task, before any keys were
// shared, and secagg_recovered stayed 0.
TEST(Sim, SecureRoundsRecoverClientsThatDieAfterSharingTheirKeys) {
  const std::vector<std::string> secure = {"--secagg", "", "--churn", "0.3", "--churn-restart", "300",
                                           "--heartbeat-interval", "0.2", "--heartbeat-timeout", "1",
                                           "--round-timeout", "10"};
  SimRun keys = RunSim("sim-churn-keys", Concat(secure, {"--churn-at", "keys"}));
  ASSERT_EQ(keys.exit_code, 0) << keys.stderr_text;
  ASSERT_EQ(keys.rounds.size(), 5u);
  for (const auto& line : keys.rounds) {
    EXPECT_TRUE(line["model_updated"].get<bool>()) << line.dump();
    EXPECT_FALSE(line.contains("secagg_aborted")) << line.dump();
    // 100 selected, 30% die after their shares: fewer than 10 in a round has p < 1e-6.
    EXPECT_GE(line["secagg_recovered"].get<uint64_t>(), 10u) << line.dump();
    EXPECT_EQ(line["clients_reported"].get<uint64_t>() + line["secagg_recovered"].get<uint64_t>(), 100u) << line.dump();
  }
  EXPECT_NE(keys.stdout_text.find(" after its key shares"), std::string::npos) << keys.stdout_text;
  EXPECT_EQ(keys.stdout_text.find(" on its task"), std::string::npos) << keys.stdout_text;

  SimRun unmask = RunSim("sim-churn-unmask", Concat(secure, {"--churn-at", "unmask"}));
  ASSERT_EQ(unmask.exit_code, 0) << unmask.stderr_text;
  ASSERT_EQ(unmask.rounds.size(), 5u);
  for (const auto& line : unmask.rounds) {
    EXPECT_TRUE(line["model_updated"].get<bool>()) << line.dump();
    EXPECT_EQ(line["secagg_recovered"].get<uint64_t>(), 0u) << "their masked inputs are in: " << line.dump();
  }
  EXPECT_NE(unmask.stdout_text.find(" at unmask"), std::string::npos) << unmask.stdout_text;
  EXPECT_GT(unmask.rounds.back()["test_accuracy"].get<double>(), 0.75);
}

// The run: 1,000 clients under secure aggregation, 30% of each round's clients dying
// at a uniform time in the round: every round completes and recovers dropouts in most rounds.
// The secure aggregation is sized for the churn (--secagg-dropout 0.4, above the 30%): at the
// default 0.2 a survivor whose neighbours happened to die more than the margin allows could
// not be unmasked, a round in some tens of runs.
TEST(Sim, SecureRoundsWithChurnAtRandomTimesAllComplete) {
  SimRun r = RunSim("sim-churn-random", {"--secagg", "", "--secagg-dropout", "0.4", "--churn", "0.3",
                                         "--churn-at", "random", "--rounds", "10",
                                         "--churn-restart", "300", "--heartbeat-interval", "0.2",
                                         "--heartbeat-timeout", "1", "--round-timeout", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_EQ(r.rounds.size(), 10u);
  int recovering = 0;
  for (const auto& line : r.rounds) {
    EXPECT_TRUE(line["model_updated"].get<bool>()) << line.dump();
    EXPECT_FALSE(line.contains("secagg_aborted")) << line.dump();
    if (line["secagg_recovered"].get<uint64_t>() > 0) ++recovering;
  }
  EXPECT_GE(recovering, 8) << "rounds that recovered a dropout";
  // The deaths land at several points of the round, not all at one.
  int points = 0;
  for (const char* where : {" in training", " after its key shares", " after its update", " at unmask"})
    points += r.stdout_text.find(where) != std::string::npos;
  EXPECT_GE(points, 3) << r.stdout_text;
  EXPECT_GT(r.rounds.back()["test_accuracy"].get<double>(), 0.75);
}

// A partition cuts 30% of the clients off from round 2 on: the round drops the selected ones
// among them (heartbeat timeout) and later rounds go on with the rest, then everyone is back
// (rounds start only with all 300 registered, so the run ends only if they return).
TEST(Sim, APartitionedGroupIsDroppedAndComesBack) {
  SimRun r = RunSim("sim-partition", {"--clients", "300", "--fraction", "0.2", "--rounds", "4", "--partition", "0.3",
                                      "--partition-round", "2", "--partition-ms", "1500", "--heartbeat-interval",
                                      "0.2", "--heartbeat-timeout", "1", "--round-timeout", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_EQ(r.rounds.size(), 4u);
  EXPECT_EQ(r.rounds[0]["clients_dropped"], 0) << r.rounds[0].dump();
  const auto& cut = r.rounds[1];
  EXPECT_GT(cut["clients_dropped"].get<uint64_t>(), 3u) << cut.dump();  // ~18 of 60 are in the group
  EXPECT_LT(cut["clients_registered"].get<uint64_t>(), 260u) << cut.dump();
  EXPECT_TRUE(cut["model_updated"].get<bool>()) << cut.dump();
  for (size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(r.rounds[i]["clients_registered"], 300) << r.rounds[i].dump();
    EXPECT_EQ(r.rounds[i]["clients_dropped"], 0) << r.rounds[i].dump();
  }
  EXPECT_NE(r.stdout_text.find("0 churn deaths"), std::string::npos) << r.stdout_text;
}

// Flapping links (down 200 ms, up 200 ms, for a fifth of the clients): frames sent while down
// are lost, the rounds that lose an update wait out their deadline, and every round closes.
TEST(Sim, FlappingClientsDoNotStopTheRounds) {
  SimRun r = RunSim("sim-flap", {"--clients", "300", "--fraction", "0.2", "--rounds", "4", "--flapping", "0.2",
                                 "--flap-ms", "200", "--heartbeat-interval", "0.1", "--heartbeat-timeout", "1",
                                 "--round-timeout", "2", "--min-clients", "200"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_EQ(r.rounds.size(), 4u);
  for (const auto& line : r.rounds) {
    EXPECT_TRUE(line["model_updated"].get<bool>()) << line.dump();
    EXPECT_GE(line["clients_reported"].get<uint64_t>(), 40u) << line.dump();  // the 48 or so that do not flap
  }
  EXPECT_EQ(r.stdout_text.find(" 0 frames lost"), std::string::npos) << r.stdout_text;
}

// Two tiers in one process (--edges): with every client in every round, 7 edge aggregators
// give the flat federation's model after every round; with a tenth of the clients sampled by
// each of 10 edges, the root takes one partial sum per edge.
TEST(Sim, EdgeAggregatorsGiveTheFlatModelAndTheRootOneSumPerEdge) {
  SimRun flat = RunSim("sim-flat", {"--clients", "300", "--fraction", "1", "--rounds", "3"});
  SimRun tree = RunSim("sim-tree", {"--clients", "300", "--fraction", "1", "--rounds", "3", "--edges", "7"});
  ASSERT_EQ(flat.exit_code, 0) << flat.stderr_text;
  ASSERT_EQ(tree.exit_code, 0) << tree.stderr_text;
  ASSERT_EQ(flat.rounds.size(), 3u);
  ASSERT_EQ(tree.rounds.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(tree.rounds[i]["model_hash"], flat.rounds[i]["model_hash"]) << i;
    EXPECT_EQ(tree.rounds[i]["clients_reported"], 7) << i;
    EXPECT_EQ(tree.rounds[i]["updates_via_edges"], 300) << i;
  }
  SimRun sampled = RunSim("sim-tree-sampled", {"--edges", "10"});
  ASSERT_EQ(sampled.exit_code, 0) << sampled.stderr_text;
  ASSERT_EQ(sampled.rounds.size(), 5u);
  for (const auto& line : sampled.rounds) {
    EXPECT_EQ(line["clients_reported"], 10) << line.dump();
    EXPECT_EQ(line["updates_via_edges"], 100) << line.dump();  // ceil(0.1 x 100) at each edge
  }
  EXPECT_GT(sampled.rounds.back()["test_accuracy"].get<double>(), 0.75);  // 0.836 here
  EXPECT_NE(sampled.stdout_text.find("10 edges"), std::string::npos) << sampled.stdout_text;
}

TEST(Sim, RefusesWhatItCannotSimulate) {
  SimRun demo = RunSim("sim-demo", {"--client-optimizer", "demo", "--strategy", "demo", "--rounds", "1"});
  EXPECT_EQ(demo.exit_code, 2);
  EXPECT_NE(demo.stderr_text.find("does not run --client-optimizer demo"), std::string::npos) << demo.stderr_text;
  // A bad task flag is refused by the service before any client starts.
  SimRun bad = RunSim("sim-bad", {"--clients", "20", "--batch-size", "0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.stderr_text.find("--batch-size"), std::string::npos) << bad.stderr_text;
  SimRun keys = RunSim("sim-keys-plain", {"--clients", "20", "--churn", "0.1", "--churn-at", "keys"});
  EXPECT_EQ(keys.exit_code, 2);
  EXPECT_NE(keys.stderr_text.find("--churn-at keys and unmask are points of a secure-aggregation round"),
            std::string::npos) << keys.stderr_text;
  SimRun at = RunSim("sim-at-bad", {"--clients", "20", "--churn-at", "midway"});
  EXPECT_EQ(at.exit_code, 2);
  EXPECT_NE(at.stderr_text.find("--churn-at 'midway'"), std::string::npos) << at.stderr_text;
  SimRun part = RunSim("sim-part-bad", {"--clients", "20", "--partition", "0.5"});
  EXPECT_EQ(part.exit_code, 2);
  EXPECT_NE(part.stderr_text.find("--partition needs --partition-ms"), std::string::npos) << part.stderr_text;
  SimRun no_clients = RunSim("sim-zero", {"--clients", "0"});
  EXPECT_EQ(no_clients.exit_code, 2);
  EXPECT_NE(no_clients.stderr_text.find("--clients must be at least 1"), std::string::npos) << no_clients.stderr_text;
}

}  // namespace
}  // namespace shoal::testing

namespace shoal::testing {
namespace {

// --codec help lists the stage registry's declarations (both CLIs share the flag).
TEST(Cli, CodecHelpListsEveryStageWithItsRanges) {
  const std::string dir = TempDir("codec-help");
  for (const char* program : {"shoal-aggregator", "shoal-sim"}) {
    Process p(BinDir() + "/" + program, {"--codec", "help"}, dir + "/" + program);
    ASSERT_EQ(p.Wait(std::chrono::milliseconds(10000)), 0) << p.Stderr();
    const std::string out = p.Stdout();
    for (const char* line : {"int8      quantize", "chunk=256         integer in [1, 16777216]", "zstd      pack", "demo      preset"})
      EXPECT_NE(out.find(line), std::string::npos) << program << " lacks '" << line << "':\n" << out;
  }
}

// Byzantine clients (runtime/sim/attack.h) against the aggregation rules (aggregate/robust.h):
// the qualitative claims of docs/BENCHMARKS.md's attack table, on 100 clients.
double FinalAccuracyUnderAttack(const std::string& name, const std::string& rule, const std::string& attack) {
  SimRun r = RunSim(name, {"--clients", "100", "--fraction", "1", "--rounds", "15", "--strategy", rule, "--attack",
                           attack, "--attackers", "0.2", "--min-part", "5"});
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_NE(r.stdout_text.find("20 attackers"), std::string::npos) << r.stdout_text;
  return r.rounds.empty() ? -1.0 : r.rounds.back()["test_accuracy"].get<double>();
}

TEST(Sim, RobustRulesHoldAgainstScalingThatBreaksFedAvg) {
  // A fifth of the clients multiply their updates by 100: the mean is theirs (0.10, chance).
  // The robust rules stay near the unattacked run (seeds 1-4: 0.82-0.89).
  EXPECT_LT(FinalAccuracyUnderAttack("atk-fedavg", "fedavg", "scale"), 0.3);
  for (const char* rule : {"median", "trimmed_mean", "multi_krum", "centered_clip"})
    EXPECT_GT(FinalAccuracyUnderAttack(std::string("atk-") + rule, rule, "scale"), 0.75) << rule;
}

TEST(Sim, InnerProductManipulationBreaksKrumNotCenteredClipping) {
  // IPM (Xie et al. 2019): the colluders' small negative multiple of the mean is the update
  // Krum finds most central; centered clipping bounds its pull. (Seeds 1-4 of this run: Krum
  // 0.04-0.13, centered clipping 0.77-0.83, as FedAvg.)
  EXPECT_LT(FinalAccuracyUnderAttack("ipm-krum", "krum", "ipm"), 0.4);
  EXPECT_GT(FinalAccuracyUnderAttack("ipm-cc", "centered_clip", "ipm"), 0.7);
}

}  // namespace
}  // namespace shoal::testing
