// Serverless training with real shoal-peer processes on 127.0.0.1: replicas that stay
// bit-identical, a killed leader and a late joiner, CURVE allow-lists and signed updates, and
// the diloco and gossip modes.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "crypto/crypto.h"
#include "crypto/keys.h"
#include "harness.h"
#include "shoal/data.h"
#include "protocol/federated.h"
#include "protocol/peer.h"

namespace shoal::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
const auto& kOneThread = OneThreadEnv();

// Per-step metrics of one peer, by step.
std::map<uint64_t, nlohmann::json> Steps(const std::string& path) {
  std::map<uint64_t, nlohmann::json> out;
  for (auto& l : ReadJsonLines(path)) out[l["step"].get<uint64_t>()] = l;
  return out;
}

struct Swarm {
  std::string dir;
  std::vector<int> ports;
  std::string keys;  // empty: no transport security
  std::vector<std::unique_ptr<Process>> peers;

  Swarm(const std::string& d, int count, bool secure) : dir(d) {
    for (int i = 0; i < count + 1; ++i) ports.push_back(FreePort());
    if (secure) {
      keys = dir + "/keys";
      std::vector<std::string> names;
      for (int i = 0; i < count + 1; ++i) names.push_back("p" + std::to_string(i));
      names.push_back("stranger");
      MakeKeys(keys, names);
      fs::create_directories(keys + "/allow");
      for (int i = 0; i < count + 1; ++i)
        fs::copy_file(keys + "/p" + std::to_string(i) + ".pub", keys + "/allow/p" + std::to_string(i) + ".pub");
    }
  }
  std::string Metrics(int i) const { return dir + "/p" + std::to_string(i) + ".jsonl"; }
  // Peer i of `parts`; i > 0 joins through peer `via`.
  std::vector<std::string> Args(int i, int parts, const std::vector<std::string>& task, int via = 0,
                                const std::string& key_name = "") const {
    std::vector<std::string> a = {"--listen", Endpoint(ports[i]), "--name", "p" + std::to_string(i), "--partition",
                                  std::to_string(i) + "/" + std::to_string(parts), "--partition-scheme", "iid",
                                  "--device", "cpu", "--metrics-out", Metrics(i), "--log-level", "info"};
    if (!keys.empty()) {
      const std::string k = key_name.empty() ? "p" + std::to_string(i) : key_name;
      a = Concat(a, {"--secret-key", keys + "/" + k + ".key", "--allow-keys", keys + "/allow"});
    }
    if (i > 0 && via >= 0) {
      std::string boot = Endpoint(ports[via]);
      if (!keys.empty()) boot += "@" + keys + "/p" + std::to_string(via) + ".pub";
      a = Concat(a, {"--peers", boot});
    }
    return Concat(a, task);
  }
  Process& Start(int i, int parts, const std::vector<std::string>& task, int via = 0) {
    peers.push_back(std::make_unique<Process>("shoal-peer", Args(i, parts, task, via), dir + "/p" + std::to_string(i),
                                              kOneThread));
    return *peers.back();
  }
  // Peer 0 founds the swarm; once it has, peers 1..count-1 join through it (each of `parts`).
  // False if peer 0 did not found it within 30 s.
  bool Found(int count, int parts, const std::vector<std::string>& task) {
    Process& founder = Start(0, parts, task);
    if (!WaitFor([&] { return founder.Stderr().find("founded swarm") != std::string::npos; }, seconds(30))) return false;
    for (int i = 1; i < count; ++i) Start(i, parts, task);
    return true;
  }
};

std::vector<std::string> DigitsTask(int steps, int min_peers, const std::string& lr) {
  return {"--model", "mlp:32", "--seed", "7", "--lr", lr, "--momentum", "0.9", "--steps", std::to_string(steps),
          "--min-peers", std::to_string(min_peers), "--step-timeout", "1", "--heartbeat-interval", "0.1",
          "--heartbeat-timeout", "1", "--eval-every", "20"};
}

// The longest of the three steps after `killed_at`, in seconds.
double LongestStepAfter(const std::map<uint64_t, nlohmann::json>& steps, uint64_t killed_at) {
  double longest = 0;
  for (const auto& [step, line] : steps)
    if (step > killed_at && step <= killed_at + 3) longest = std::max(longest, line["seconds"].get<double>());
  return longest;
}

// Every step that every peer in `peers` committed has one model hash across them.
void ExpectSameHashes(const std::vector<std::map<uint64_t, nlohmann::json>>& peers, uint64_t* common = nullptr) {
  uint64_t shared = 0;
  for (const auto& [step, line] : peers[0]) {
    bool everywhere = true;
    for (size_t p = 1; p < peers.size(); ++p) {
      auto it = peers[p].find(step);
      if (it == peers[p].end()) {
        everywhere = false;
        continue;
      }
      EXPECT_EQ(it->second["model_hash"], line["model_hash"]) << "step " << step << ", peer " << p;
    }
    shared += everywhere;
  }
  EXPECT_GT(shared, 0u) << "no step is in every peer's metrics: nothing was compared";
  if (common) *common = shared;
}

// 4 peers in allgather mode see as many examples as a 10-round, 4-client FedAvg run
// (10 x 1438 = 4 x 32 x 112), end within 2 points of it, and agree on the model at every step.
TEST(Peers, AllgatherMatchesFedAvgWithIdenticalReplicas) {
  const std::string dir = TempDir("peers-allgather");
  const int port = FreePort();
  Process agg("shoal-aggregator", AggregatorArgs(port, 10, 4, dir + "/fedavg.jsonl"), dir + "/agg", kOneThread);
  auto clients = StartClients(port, 4, dir + "/clients");
  ASSERT_EQ(agg.Wait(seconds(120)), 0) << agg.Stderr();
  ExpectAllExitZero(clients);
  const double fedavg = ReadJsonLines(dir + "/fedavg.jsonl").back()["test_accuracy"].get<double>();

  Swarm swarm(dir, 4, /*secure=*/false);
  const auto task = DigitsTask(112, 4, "0.1");
  for (int i = 0; i < 4; ++i) swarm.Start(i, 4, task);
  for (auto& p : swarm.peers) EXPECT_EQ(p->Wait(seconds(120)), 0) << p->Stderr();
  std::vector<std::map<uint64_t, nlohmann::json>> steps;
  for (int i = 0; i < 4; ++i) steps.push_back(Steps(swarm.Metrics(i)));
  ASSERT_EQ(steps[0].rbegin()->first, 112u);
  uint64_t common = 0;
  ExpectSameHashes(steps, &common);
  EXPECT_GE(common, 100u) << "every peer took part from (nearly) the first step";
  for (const auto& [step, line] : steps[0])
    if (step > 5) {
      EXPECT_EQ(line["included"], 4) << step;
    }
  const double peers = steps[0].rbegin()->second["test_accuracy"].get<double>();
  EXPECT_GT(peers, 0.9);
  EXPECT_NEAR(peers, fedavg, 0.02) << "allgather " << peers << " vs FedAvg " << fedavg;
}

// Every peer is given the same bootstrap list, its own address included, as users of p2p tools
// expect: each skips its own entry; the first listed founds the swarm once no other answers,
// even when started last; the others join it. One swarm, one model.
TEST(Peers, EveryPeerGivenTheSameBootstrapListFormsOneSwarm) {
  const std::string dir = TempDir("peers-same-list");
  Swarm swarm(dir, 3, /*secure=*/true);
  std::vector<std::string> list = {"--peers"};
  for (int i = 0; i < 3; ++i)
    list.push_back(Endpoint(swarm.ports[i]) + "@" + swarm.keys + "/p" + std::to_string(i) + ".pub");
  for (int i = 2; i >= 0; --i)
    swarm.peers.push_back(std::make_unique<Process>(
        "shoal-peer", Concat(swarm.Args(i, 3, DigitsTask(40, 3, "0.1"), /*via=*/-1), list),
        dir + "/p" + std::to_string(i), kOneThread));
  int founders = 0;
  for (auto& p : swarm.peers) {
    EXPECT_EQ(p->Wait(seconds(120)), 0) << p->Stderr();
    founders += p->Stderr().find("founded swarm") != std::string::npos;
  }
  EXPECT_EQ(founders, 1);
  EXPECT_NE(swarm.peers[2]->Stderr().find("p0: no other peer of --peers answered (this one is listed 1 of 3)"),
            std::string::npos)
      << swarm.peers[2]->Stderr();
  std::vector<std::map<uint64_t, nlohmann::json>> steps;
  for (int i = 0; i < 3; ++i) steps.push_back(Steps(swarm.Metrics(i)));
  for (const auto& s : steps) ASSERT_EQ(s.rbegin()->first, 40u);
  uint64_t common = 0;
  ExpectSameHashes(steps, &common);
  EXPECT_GE(common, 35u);
}

// Peers on an ordinary CSV (scripts/setup's wine.csv: a header, named labels in the first
// column, features in natural units): the founder fits the standardization on its training
// split and puts it in the swarm's task; the joiner applies the same map, and the replicas,
// one model, learn. Without standardization (--standardize off) the same swarm does not.
TEST(Peers, ACsvSwarmStandardizesWithTheFoundersStatistics) {
  const std::string spec = "csv:" + data::DefaultDataDir() +
                           "/wine.csv,label=cultivar";
  auto run = [&](const std::string& name, const std::string& standardize) {
    Swarm swarm(TempDir(name), 2, /*secure=*/false);
    const std::vector<std::string> task = {"--model", "linear", "--dataset", spec, "--seed", "7", "--lr", "0.1",
                                           "--momentum", "0.9", "--steps", "150", "--min-peers", "2",
                                           "--test-fraction", "0.5", "--eval-every", "50", "--standardize",
                                           standardize, "--step-timeout", "1", "--heartbeat-interval", "0.1",
                                           "--heartbeat-timeout", "1"};
    EXPECT_TRUE(swarm.Found(2, 2, task));
    for (auto& p : swarm.peers) EXPECT_EQ(p->Wait(seconds(120)), 0) << p->Stderr();
    std::vector<std::map<uint64_t, nlohmann::json>> steps = {Steps(swarm.Metrics(0)), Steps(swarm.Metrics(1))};
    ExpectSameHashes(steps);
    EXPECT_EQ(steps[1].rbegin()->second["test_accuracy"], steps[0].rbegin()->second["test_accuracy"])
        << "the joiner evaluates on the same standardized held-out split";
    return steps[0].rbegin()->second["test_accuracy"].get<double>();
  };
  EXPECT_GT(run("peers-wine", "auto"), 0.9);
  EXPECT_LT(run("peers-wine-raw", "off"), 0.8);
}

// The leader is SIGKILLed mid-run: the others go on within two step deadlines; a new peer
// joins through a survivor, loads the replica (hash-verified) and matches it from its first step.
TEST(Peers, SurviveAKilledLeaderAndCatchUpALateJoiner) {
  const std::string dir = TempDir("peers-churn");
  Swarm swarm(dir, 3, /*secure=*/true);
  auto task = DigitsTask(0, 3, "0.1");  // until stopped
  SetFlag(task, "--model", "mlp:256");  // steps of a few ms: the run is long enough to watch
  ASSERT_TRUE(swarm.Found(3, 4, task));
  Process &p0 = *swarm.peers[0], &p1 = *swarm.peers[1], &p2 = *swarm.peers[2];
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(1)).size() >= 50; }, seconds(60))) << p1.Stderr();
  p0.Signal(SIGKILL);
  EXPECT_EQ(p0.Wait(seconds(5)), 128 + SIGKILL);
  const uint64_t killed_at = Steps(swarm.Metrics(1)).rbegin()->first;
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(1)).rbegin()->first > killed_at + 50; }, seconds(60)))
      << "the survivors stopped after the leader died: " << p1.Stderr();
  Process& p3 = swarm.Start(3, 4, task, /*via=*/1);
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(3)).size() >= 50; }, seconds(60))) << p3.Stderr();
  for (Process* p : {&p1, &p2, &p3}) p->Signal(SIGTERM);
  for (Process* p : {&p1, &p2, &p3}) EXPECT_EQ(p->Wait(seconds(30)), 0) << p->Stderr();

  const auto s1 = Steps(swarm.Metrics(1)), s2 = Steps(swarm.Metrics(2)), s3 = Steps(swarm.Metrics(3));
  // Two step deadlines (1 s each) bound the step that lost its leader.
  EXPECT_LT(LongestStepAfter(s1, killed_at), 2.0) << "steps after the kill";
  EXPECT_EQ(s1.at(killed_at + 10)["members"], 2);
  EXPECT_GT(s3.begin()->first, killed_at + 50) << "p3 joined late";
  uint64_t common = 0;
  ExpectSameHashes({s1, s2, s3}, &common);
  EXPECT_GE(common, 40u);
  EXPECT_EQ(s3.begin()->second["model_hash"], s1.at(s3.begin()->first)["model_hash"]) << "from its first step";
  EXPECT_GE(s3.begin()->second["resyncs"].get<int>(), 1) << "the replica came by state transfer";
  EXPECT_EQ(s1.rbegin()->second["divergences"], 0);
}

// --overlap with DeMo (one step of delay: step t's updates start from the replica after t-2):
// the leader is SIGKILLed mid-run, a new member joins late (its first update starts from the
// replica it loaded, and counts), and every replica has one model hash at every step over more
// than 100 steps; the swarm still learns.
TEST(Peers, OverlappedDemoStepsKeepOneModelThroughChurn) {
  const std::string dir = TempDir("peers-overlap");
  Swarm swarm(dir, 4, /*secure=*/false);
  auto task = DigitsTask(0, 4, "0.01");  // until stopped
  task = Concat(task, {"--mode", "allgather", "--client-optimizer", "demo", "--codec", "demo:chunk=64,topk=8,bits=1",
                       "--overlap"});
  ASSERT_TRUE(swarm.Found(4, 5, task));
  Process& p0 = *swarm.peers[0];
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(1)).size() >= 40; }, seconds(60))) << swarm.peers[1]->Stderr();
  p0.Signal(SIGKILL);
  EXPECT_EQ(p0.Wait(seconds(5)), 128 + SIGKILL);
  const uint64_t killed_at = Steps(swarm.Metrics(1)).rbegin()->first;
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(1)).rbegin()->first > killed_at + 30; }, seconds(60)))
      << "the survivors stopped after the leader died: " << swarm.peers[1]->Stderr();
  Process& late = swarm.Start(4, 5, task, /*via=*/1);
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(4)).size() >= 60; }, seconds(60))) << late.Stderr();
  std::vector<Process*> running = {swarm.peers[1].get(), swarm.peers[2].get(), swarm.peers[3].get(), &late};
  for (Process* p : running) p->Signal(SIGTERM);
  for (Process* p : running) EXPECT_EQ(p->Wait(seconds(30)), 0) << p->Stderr();

  std::vector<std::map<uint64_t, nlohmann::json>> s;
  for (int i = 1; i <= 4; ++i) s.push_back(Steps(swarm.Metrics(i)));
  const auto& s1 = s[0];
  ASSERT_GE(s1.rbegin()->first, 130u);
  // p1 took part in (nearly) every step: a resync after the leader's death may skip a few.
  EXPECT_GE(s1.size(), s1.rbegin()->first - 5);
  uint64_t common = 0;
  ExpectSameHashes({s[0], s[1], s[2]}, &common);
  EXPECT_GE(common, 100u);
  ExpectSameHashes({s[0], s[3]});
  const uint64_t joined = s[3].begin()->first;
  EXPECT_GT(joined, killed_at + 30) << "p4 joined late";
  EXPECT_EQ(s[3].begin()->second["model_hash"], s1.at(joined)["model_hash"]) << "from its first step";
  EXPECT_GE(s[3].begin()->second["resyncs"].get<int>(), 1) << "the replica came by state transfer";
  auto after_kill = s1.lower_bound(killed_at + 10);
  ASSERT_NE(after_kill, s1.end());
  EXPECT_EQ(after_kill->second["members"], 3);
  // The joiner's updates count from its first steps on (the one from the replica it loaded,
  // then the delayed ones): nearly every step after it joined includes all four.
  int with_all = 0, steps = 0;
  for (auto it = s1.lower_bound(joined + 3); it != s1.end() && it->first <= joined + 50; ++it, ++steps)
    with_all += it->second["included"] == 4;
  EXPECT_GE(steps, 40);
  EXPECT_GE(with_all, steps - 3) << with_all << " of " << steps << " steps included all four";
  for (const auto& line : s) EXPECT_EQ(line.rbegin()->second["divergences"], 0);
  // The followers applied steps ahead of their commits (and rolled back when one differed).
  for (int i : {1, 2}) {
    const auto& last = s[i].rbegin()->second;
    EXPECT_GT(last["applied_ahead"].get<uint64_t>(), 30u) << "p" << i + 1;
    std::printf("p%d: %llu steps applied ahead, %llu rolled back\n", i + 1,
                static_cast<unsigned long long>(last["applied_ahead"].get<uint64_t>()),
                static_cast<unsigned long long>(last["rollbacks"].get<uint64_t>()));
  }
  double accuracy = -1;
  for (const auto& [step, line] : s1)
    if (line.contains("test_accuracy")) accuracy = line["test_accuracy"].get<double>();
  EXPECT_GT(accuracy, 0.8) << "the delayed DeMo steps learn digits";
}

// Without churn an overlapped swarm is a function of its task, not of timing: every update of
// step t starts from the replica after t-2 even when a member applies two commits in a row,
// and the steps applied ahead are the committed ones. Two runs, the same model at every step.
TEST(Peers, OverlappedStepsGiveTheSameModelWhateverTheTiming) {
  std::vector<std::map<uint64_t, nlohmann::json>> runs;
  for (int run = 0; run < 2; ++run) {
    const std::string dir = TempDir("peers-overlap-" + std::to_string(run));
    Swarm swarm(dir, 4, /*secure=*/false);
    auto task = DigitsTask(60, 4, "0.01");
    task = Concat(task, {"--mode", "allgather", "--client-optimizer", "demo", "--codec",
                         "demo:chunk=64,topk=8,bits=1", "--overlap"});
    for (int i = 0; i < 4; ++i) swarm.Start(i, 4, task);
    for (auto& p : swarm.peers) EXPECT_EQ(p->Wait(seconds(120)), 0) << p->Stderr();
    std::vector<std::map<uint64_t, nlohmann::json>> steps;
    for (int i = 0; i < 4; ++i) steps.push_back(Steps(swarm.Metrics(i)));
    uint64_t common = 0;
    ExpectSameHashes(steps, &common);
    EXPECT_GE(common, 55u);
    EXPECT_GT(steps[2].rbegin()->second["applied_ahead"].get<uint64_t>(), 0u);
    runs.push_back(steps[0]);
  }
  ASSERT_EQ(runs[0].size(), 60u);
  ASSERT_EQ(runs[1].size(), 60u);
  for (uint64_t step = 1; step <= 60; ++step)
    ASSERT_EQ(runs[0].at(step)["model_hash"], runs[1].at(step)["model_hash"]) << "step " << step;
}

// allreduce: 4 peers sum their gradients on a ring all-reduce. Each sends 2 (N-1)/N of the
// dense model per step (plus frame headers and heartbeats), the replicas agree at every step
// and learn as well as allgather does (the FedAvg-equivalent run above ends above 0.9). A
// member SIGKILLed mid-run is dropped at the heartbeat timeout, the step's ring restarts on
// the survivors, and a late joiner loads the replica and joins the ring.
TEST(Peers, AllreduceIsBandwidthOptimalAndSurvivesAMemberKilledMidRing) {
  const std::string dir = TempDir("peers-allreduce");
  Swarm swarm(dir, 4, /*secure=*/true);
  auto task = Concat(DigitsTask(0, 4, "0.1"), {"--mode", "allreduce"});
  ASSERT_TRUE(swarm.Found(4, 5, task));
  Process &p0 = *swarm.peers[0], &p1 = *swarm.peers[1], &p2 = *swarm.peers[2], &p3 = *swarm.peers[3];
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(1)).size() >= 120; }, seconds(60))) << p1.Stderr();
  p2.Signal(SIGKILL);  // steps take milliseconds, nearly all of it on the ring
  EXPECT_EQ(p2.Wait(seconds(5)), 128 + SIGKILL);
  const uint64_t killed_at = Steps(swarm.Metrics(1)).rbegin()->first;
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(1)).rbegin()->first > killed_at + 50; }, seconds(60)))
      << "the survivors stopped after a member died: " << p1.Stderr();
  Process& p4 = swarm.Start(4, 5, task, /*via=*/1);
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(4)).size() >= 30; }, seconds(60))) << p4.Stderr();
  for (Process* p : {&p0, &p1, &p3, &p4}) p->Signal(SIGTERM);
  for (Process* p : {&p0, &p1, &p3, &p4}) EXPECT_EQ(p->Wait(seconds(30)), 0) << p->Stderr();

  const auto s0 = Steps(swarm.Metrics(0)), s1 = Steps(swarm.Metrics(1)), s3 = Steps(swarm.Metrics(3)),
             s4 = Steps(swarm.Metrics(4));
  uint64_t common = 0;
  ExpectSameHashes({s0, s1, s3, s4}, &common);
  EXPECT_GE(common, 25u);
  // Bandwidth: with 4 members, 1.5 dense models per step and member.
  const double dense = 4.0 * (64 * 32 + 32 + 32 * 10 + 10);
  std::vector<double> sent;
  for (const auto& [step, line] : s1)
    if (step > 10 && step < killed_at - 5 && line["members"] == 4) sent.push_back(line["bytes_sent"].get<double>());
  ASSERT_GE(sent.size(), 50u);
  std::nth_element(sent.begin(), sent.begin() + sent.size() / 2, sent.end());
  EXPECT_GE(sent[sent.size() / 2], 1.5 * dense);
  EXPECT_LE(sent[sent.size() / 2], 1.5 * dense * 1.25) << "frame headers, the commit and heartbeats only";
  // The kill: the ring waits for the heartbeat timeout (1 s), then goes on with 3 members.
  EXPECT_LT(LongestStepAfter(s1, killed_at), 3.0) << "steps after the kill";
  EXPECT_EQ(s1.at(killed_at + 10)["members"], 3);
  EXPECT_GE(s1.at(killed_at + 10)["ring_restarts"].get<int>(), 1);
  EXPECT_EQ(s4.begin()->second["model_hash"], s1.at(s4.begin()->first)["model_hash"]) << "from its first step";
  // The joiner is in the ring (not its last line: the four stop one by one, and a ring that
  // has lost the others can finish its step alone before its own SIGTERM is seen).
  EXPECT_EQ(s4.at(s4.begin()->first + 20)["members"], 4);
  EXPECT_EQ(s1.rbegin()->second["divergences"], 0);
  double accuracy = 0;  // the last evaluation (every 20 steps)
  for (const auto& [step, line] : s1) accuracy = line.value("test_accuracy", accuracy);
  EXPECT_GT(accuracy, 0.85);
}

// A member paused (SIGSTOP) for three heartbeat timeouts is dropped by the others and drops
// them in turn when it wakes; both sides readmit each other on the old authenticated routes
// (no new Join), the paused replica catches up by state transfer, and the swarm agrees again.
TEST(Peers, APausedMemberIsReadmittedAndCatchesUp) {
  const std::string dir = TempDir("peers-pause");
  Swarm swarm(dir, 3, /*secure=*/true);
  auto task = DigitsTask(0, 3, "0.1");
  SetFlag(task, "--model", "mlp:256");
  ASSERT_TRUE(swarm.Found(3, 3, task));
  Process &p0 = *swarm.peers[0], &p1 = *swarm.peers[1], &p2 = *swarm.peers[2];
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(2)).size() >= 30; }, seconds(60))) << p2.Stderr();
  p2.Signal(SIGSTOP);
  const uint64_t paused_at = Steps(swarm.Metrics(0)).rbegin()->first;
  // Paused until the others have gone on without it (they drop it on its heartbeat timeout).
  EXPECT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(0)).rbegin()->first > paused_at + 10; }, seconds(60)))
      << p0.Stderr();
  p2.Signal(SIGCONT);
  const uint64_t resumed_at = Steps(swarm.Metrics(0)).rbegin()->first;
  EXPECT_GT(resumed_at, paused_at + 5) << "the others went on without the paused member";
  ASSERT_TRUE(WaitFor([&] {
    const auto s2 = Steps(swarm.Metrics(2));
    return !s2.empty() && s2.rbegin()->first > resumed_at + 30 && s2.rbegin()->second["members"] == 3;
  }, seconds(60))) << p2.Stderr();
  for (Process* p : {&p0, &p1, &p2}) p->Signal(SIGTERM);
  for (Process* p : {&p0, &p1, &p2}) EXPECT_EQ(p->Wait(seconds(30)), 0) << p->Stderr();

  const auto s0 = Steps(swarm.Metrics(0)), s1 = Steps(swarm.Metrics(1)), s2 = Steps(swarm.Metrics(2));
  EXPECT_GE(s0.rbegin()->second["readmitted"].get<int>(), 1) << p0.Stderr();
  EXPECT_GE(s2.rbegin()->second["resyncs"].get<int>(), 2) << "joining, then catching up: " << p2.Stderr();
  // From some step after the resume on, all three agree at every step.
  std::vector<std::map<uint64_t, nlohmann::json>> tail(3);
  for (int i = 0; i < 3; ++i)
    for (const auto& [step, line] : (i == 0 ? s0 : i == 1 ? s1 : s2))
      if (step > resumed_at + 20) tail[i][step] = line;
  uint64_t common = 0;
  ExpectSameHashes(tail, &common);
  EXPECT_GE(common, 5u);
}

// A raw member speaking the protocol by hand: a listed key, a ROUTER the peers connect to.
class RawPeer {
 public:
  RawPeer(const Swarm& swarm, int target) : router_(ctx_, zmq::socket_type::router), dealer_(ctx_, zmq::socket_type::dealer) {
    keys_ = crypto::ReadSecretKeyFile(swarm.keys + "/p3.key").value();  // listed, unused by real peers here
    port_ = FreePort();
    router_.set(zmq::sockopt::curve_server, 1);
    zmq_setsockopt(router_.handle(), ZMQ_CURVE_SECRETKEY, keys_.curve_secret.data(), 32);
    router_.set(zmq::sockopt::linger, 0);
    router_.bind(Endpoint(port_));
    std::array<uint8_t, 32> server{};
    EXPECT_TRUE(crypto::Z85DecodeTo(crypto::ReadPublicKey(swarm.keys + "/p" + std::to_string(target) + ".pub").value(), server).ok());
    zmq_setsockopt(dealer_.handle(), ZMQ_CURVE_SERVERKEY, server.data(), 32);
    zmq_setsockopt(dealer_.handle(), ZMQ_CURVE_PUBLICKEY, keys_.curve_public.data(), 32);
    zmq_setsockopt(dealer_.handle(), ZMQ_CURVE_SECRETKEY, keys_.curve_secret.data(), 32);
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.connect(Endpoint(swarm.ports[target]));
  }
  protocol::PeerInfo Info() const {
    protocol::PeerInfo p;
    p.name = "mallory";
    p.endpoint = Endpoint(port_);
    p.curve_key = crypto::Z85Key(keys_.curve_public);
    p.sign_key = keys_.sign_public;
    return p;
  }
  void Send(const protocol::Frame& f) { dealer_.send(zmq::buffer(f)); }
  // Reads what the peers send to our ROUTER for `ms`; returns the swarm id and latest step seen.
  std::pair<uint64_t, uint64_t> Listen(int ms) {
    const auto until = std::chrono::steady_clock::now() + milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, milliseconds(20)) == 0) continue;
      zmq::message_t id, body;
      (void)router_.recv(id);
      if (!id.more()) continue;
      (void)router_.recv(body);
      auto v = protocol::VerifyFrame({static_cast<const uint8_t*>(body.data()), body.size()}, 64 << 20);
      if (!v.ok()) continue;
      if (v.envelope->session()) swarm_ = v.envelope->session();
      step_ = std::max<uint64_t>(step_, v.envelope->round());
    }
    return {swarm_, step_};
  }

  const crypto::KeyPair& keys() const { return keys_; }

 private:
  zmq::context_t ctx_;
  zmq::socket_t router_, dealer_;
  crypto::KeyPair keys_;
  int port_ = 0;
  uint64_t swarm_ = 0, step_ = 0;
};

// The raw member says Bye; every peer then ends the run, and the replicas agree step by step.
std::vector<std::map<uint64_t, nlohmann::json>> LeaveAndCheckAgreement(RawPeer& m, Swarm& swarm, uint64_t swarm_id,
                                                                      uint64_t seq) {
  m.Listen(300);
  m.Send(protocol::EncodeBye({swarm_id, 0, 0, seq}, "done"));
  m.Listen(200);
  for (auto& p : swarm.peers) EXPECT_EQ(p->Wait(seconds(120)), 0) << p->Stderr();
  std::vector<std::map<uint64_t, nlohmann::json>> steps;
  for (int i = 0; i < 3; ++i) steps.push_back(Steps(swarm.Metrics(i)));
  ExpectSameHashes(steps);
  return steps;
}

// Only listed keys get in, and only correctly signed updates count (docs/SECURITY.md, "Serverless
// peers"): a stranger's key is refused at the handshake; from a listed member, an update with a
// wrong signature, one claiming another author, one whose payload is not the one it signed, a
// genuinely signed update replayed at another step or in another swarm, a Join carrying another
// CURVE key than the connection's, and a Join taking a member's name are each rejected and
// counted, none is included, and the replicas still agree.
TEST(Peers, UnlistedPeersAreRefusedAndForgedUpdatesRejected) {
  const std::string dir = TempDir("peers-forged");
  Swarm swarm(dir, 3, /*secure=*/true);
  const auto task = DigitsTask(400, 3, "0.1");
  ASSERT_TRUE(swarm.Found(3, 3, task));

  // A peer whose key is not on the allow-list: refused at the CURVE handshake, a clear error.
  Process stranger("shoal-peer", swarm.Args(3, 4, task, 0, "stranger"), dir + "/stranger", kOneThread);
  EXPECT_EQ(stranger.Wait(seconds(30)), 1) << stranger.Stderr();
  EXPECT_NE(stranger.Stderr().find("refused this key"), std::string::npos) << stranger.Stderr();

  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(0)).size() >= 20; }, seconds(60)));
  RawPeer m(swarm, 0);
  m.Send(protocol::EncodeJoin({0, 0, 0, 1}, m.Info(), false));
  auto [swarm_id, step] = m.Listen(500);
  ASSERT_NE(swarm_id, 0u) << "p0 connected back to the raw member";
  uint64_t seq = 1;
  const std::vector<uint8_t> payload(2410 * 4, 0);  // a dense zero update of mlp:32
  const auto chunk = protocol::SplitPayload(payload, 1 << 20).at(0);
  const std::string base(64, '0');
  // 1. Its own name, a signature over other bytes.
  crypto::Signature bad = crypto::Sign(std::vector<uint8_t>{1, 2, 3}, m.keys().sign_secret);
  for (uint64_t s = step; s <= step + 2; ++s)
    m.Send(protocol::EncodePeerUpdate({swarm_id, s, 0, ++seq}, "mallory", base, 32, 1.0, chunk, bad));
  // 2. Another member's name, correctly signed with its own key.
  const auto good = crypto::Sign(protocol::SignedUpdateBytes(swarm_id, step + 1, "p1", base, 32, 1.0, crypto::Hash256(payload)), m.keys().sign_secret);
  m.Send(protocol::EncodePeerUpdate({swarm_id, step + 1, 0, ++seq}, "p1", base, 32, 1.0, chunk, good));
  // 3. Its own name, signed genuinely over one payload, sent with another.
  std::vector<uint8_t> other(payload.size(), 0);
  other[0] = 0x3f;  // 0.5f in the first coordinate's high byte
  const uint64_t now = m.Listen(50).second;
  for (uint64_t s = now; s <= now + 2; ++s) {  // one of them lands in the window the peers take
    const auto signed_zero = crypto::Sign(
        protocol::SignedUpdateBytes(swarm_id, s, "mallory", base, 32, 1.0, crypto::Hash256(payload)), m.keys().sign_secret);
    m.Send(protocol::EncodePeerUpdate({swarm_id, s, 0, ++seq}, "mallory", base, 32, 1.0,
                                      protocol::SplitPayload(other, 1 << 20).at(0), signed_zero));
  }
  // 4. A genuinely signed update replayed at the next step, and in another swarm. (Another
  // member's update relayed by mallory is BadSender, case 2: only its author may send it,
  // unless asked for it with UpdateFetch, whose copies the signature then binds.)
  const uint64_t at = m.Listen(50).second;
  for (uint64_t s = at; s <= at + 2; ++s) {
    const auto genuine = crypto::Sign(
        protocol::SignedUpdateBytes(swarm_id, s, "mallory", base, 32, 1.0, crypto::Hash256(payload)), m.keys().sign_secret);
    m.Send(protocol::EncodePeerUpdate({swarm_id, s + 1, 0, ++seq}, "mallory", base, 32, 1.0, chunk, genuine));
    m.Send(protocol::EncodePeerUpdate({swarm_id + 1, s, 0, ++seq}, "mallory", base, 32, 1.0, chunk, genuine));
  }
  // 5. A Join carrying p1's CURVE key on mallory's connection, and one taking p1's name.
  protocol::PeerInfo wrong_key = m.Info();
  wrong_key.curve_key = crypto::ReadPublicKey(swarm.keys + "/p1.pub").value();
  m.Send(protocol::EncodeJoin({swarm_id, 0, 0, ++seq}, wrong_key, false));
  protocol::PeerInfo taken = m.Info();
  taken.name = "p1";
  m.Send(protocol::EncodeJoin({swarm_id, 0, 0, ++seq}, taken, false));
  const auto steps = LeaveAndCheckAgreement(m, swarm, swarm_id, ++seq);
  const auto& codes = steps[0].rbegin()->second["rejected_by_code"];
  EXPECT_GE(codes.value("BadSignature", 0), 3) << "a wrong signature, another payload, another step: " << codes.dump();
  EXPECT_GE(codes.value("BadSender", 0), 2) << "another author, another key: " << codes.dump();
  EXPECT_GE(codes.value("Refused", 0), 1) << "a member's name: " << codes.dump();
  EXPECT_GE(codes.value("UnknownSession", 0), 1) << "another swarm: " << codes.dump();
  for (const auto& [s, line] : steps[0]) EXPECT_LE(line["included"].get<int>(), 3) << "mallory never counted";
  EXPECT_GT(steps[0].rbegin()->second["test_accuracy"].get<double>(), 0.9);
}

// The ring all-reduce's hops, from a listed member (docs/SECURITY.md, "Peers"): a hop of a ring
// the receiver can place must come from the member before it (checked before anything is held
// for it), every piece is signed by its sender over where it goes and what it sums (a bad
// signature, or a genuine one over another payload, is rejected), and no member can make a
// peer hold more than its bound of hops however many it makes up. The replicas still agree.
TEST(Peers, RingHopsAreFromThePredecessorSignedAndBounded) {
  const std::string dir = TempDir("peers-ring-forged");
  Swarm swarm(dir, 3, /*secure=*/true);
  const auto task = Concat(DigitsTask(300, 3, "0.1"), {"--mode", "allreduce"});
  ASSERT_TRUE(swarm.Found(3, 3, task));
  ASSERT_TRUE(WaitFor([&] { return Steps(swarm.Metrics(1)).size() >= 20; }, seconds(60)));
  RawPeer m(swarm, 1);  // p1's predecessor is p0 on the ring [mallory, p0, p1, p2]
  m.Send(protocol::EncodeJoin({0, 0, 0, 1}, m.Info(), false));
  auto [swarm_id, step] = m.Listen(300);
  ASSERT_NE(swarm_id, 0u) << "p1 connected back to the raw member";
  const uint64_t at = step + 1;
  uint64_t seq = 1;
  const std::string view = "mallory\np0\np1\np2\n";
  const std::string ring = crypto::HashHex({reinterpret_cast<const uint8_t*>(view.data()), view.size()});
  const std::string made_up(64, 'e');
  auto hop = [&](const std::string& hash, uint8_t phase, uint32_t index) {
    return protocol::RingSegment{.ring_hash = hash, .attempt = 0, .phase = phase, .hop = index, .segment = 0,
                                 .contributors = 1, .weight = 32, .loss = 1, .piece = 0, .chunk = {}, .signature = {}};
  };
  auto sign = [&](protocol::RingSegment& r, const std::vector<uint8_t>& payload) {
    r.signature = crypto::Sign(protocol::SignedRingHopBytes(swarm_id, at, "mallory", r, crypto::Hash256(payload)),
                               m.keys().sign_secret);
  };
  const std::vector<uint8_t> payload(800 * 4, 0);
  const auto whole = protocol::SplitPayload(payload, 1 << 20).at(0);
  // 1. A genuinely signed hop of the ring p1 runs, from a member who is not before it.
  auto r = hop(ring, 0, 0);
  sign(r, payload);
  m.Send(protocol::EncodeRingSegment({swarm_id, at, 0, ++seq}, r, whole));
  // 2. A hop signed over other bytes; 3. a genuine signature over another payload.
  r = hop(made_up, 0, 0);
  r.signature = crypto::Sign(std::vector<uint8_t>{1, 2, 3}, m.keys().sign_secret);
  m.Send(protocol::EncodeRingSegment({swarm_id, at, 0, ++seq}, r, whole));
  r = hop(made_up, 0, 1);
  std::vector<uint8_t> other = payload;
  other[5] = 1;
  sign(r, other);
  m.Send(protocol::EncodeRingSegment({swarm_id, at, 0, ++seq}, r, whole));
  // 4. Half-sent pieces of 84,000 bytes in made-up hops, 42,000 bytes each held: mlp:32's
  //    bound is 4 x (2 x 2410 x 4 + 65,536) = 339,264 bytes, so the ninth is refused.
  const std::vector<uint8_t> big(84000, 0);
  const auto half = protocol::SplitPayload(big, 42000).at(0);
  for (uint32_t h = 0; h < 11; ++h) {
    r = hop(made_up, 1, h);
    sign(r, big);
    m.Send(protocol::EncodeRingSegment({swarm_id, at, 0, ++seq}, r, half));
  }
  const auto steps = LeaveAndCheckAgreement(m, swarm, swarm_id, ++seq);
  const auto& codes = steps[1].rbegin()->second["rejected_by_code"];
  EXPECT_EQ(codes.value("BadSender", 0), 1) << codes.dump();
  EXPECT_EQ(codes.value("BadSignature", 0), 2) << codes.dump();
  EXPECT_GE(codes.value("MalformedFrame", 0), 3) << "the ninth to eleventh half-pieces: " << codes.dump();
  EXPECT_NE(swarm.peers[1]->Stderr().find("would hold more than 339264 bytes"), std::string::npos)
      << swarm.peers[1]->Stderr();
  EXPECT_GT(steps[0].rbegin()->second["test_accuracy"].get<double>(), 0.9);
}

// DiLoCo: 30 inner AdamW steps per outer step, an outer Nesterov step on the mean
// pseudo-gradient; the replicas agree at every outer step and the model learns digits.
TEST(Peers, DilocoConverges) {
  const std::string dir = TempDir("peers-diloco");
  Swarm swarm(dir, 3, false);
  const std::vector<std::string> task = {"--mode", "diloco", "--model", "mlp:32", "--seed", "7", "--client-optimizer",
                                         "adamw", "--lr", "0.003", "--diloco-inner-steps", "30", "--steps", "10",
                                         "--min-peers", "3", "--eval-every", "1"};
  // Peer 1 is itself a data-parallel job (two CPU ranks for its inner steps): still one update
  // an outer step, the same swarm model.
  for (int i = 0; i < 3; ++i) swarm.Start(i, 3, i == 1 ? Concat(task, {"--ranks", "2"}) : task);
  for (auto& p : swarm.peers) EXPECT_EQ(p->Wait(seconds(120)), 0) << p->Stderr();
  EXPECT_NE(swarm.peers[1]->Stderr().find("x 2 data-parallel ranks"), std::string::npos) << swarm.peers[1]->Stderr();
  std::vector<std::map<uint64_t, nlohmann::json>> steps;
  for (int i = 0; i < 3; ++i) steps.push_back(Steps(swarm.Metrics(i)));
  ExpectSameHashes(steps);
  ASSERT_EQ(steps[0].size(), 10u);
  EXPECT_GT(steps[0].at(10)["test_accuracy"].get<double>(), 0.9);
  EXPECT_GT(steps[0].at(10)["test_accuracy"].get<double>(), steps[0].at(1)["test_accuracy"].get<double>());
}

// Gossip: each step a local SGD step, then an average with 2 members drawn from the step's
// seed. Replicas differ (their spread is reported and small) and every one learns digits.
TEST(Peers, GossipConvergesWithASmallSpread) {
  const std::string dir = TempDir("peers-gossip");
  Swarm swarm(dir, 4, false);
  auto task = DigitsTask(300, 4, "0.1");
  task = Concat(task, {"--mode", "gossip", "--gossip-k", "2"});
  for (int i = 0; i < 4; ++i) swarm.Start(i, 4, task);
  for (auto& p : swarm.peers) EXPECT_EQ(p->Wait(seconds(120)), 0) << p->Stderr();
  std::set<std::string> hashes;
  for (int i = 0; i < 4; ++i) {
    const auto s = Steps(swarm.Metrics(i));
    ASSERT_EQ(s.rbegin()->first, 300u);
    const auto& last = s.rbegin()->second;
    EXPECT_GT(last["test_accuracy"].get<double>(), 0.9) << "peer " << i;
    // The spread (RMS distance to the models received) over the steps that received any.
    double spread = 0;
    int averaged = 0;
    for (const auto& [step, line] : s) {
      ASSERT_TRUE(line.contains("spread"));
      if (line["included"].get<int>() > 1) {
        spread += line["spread"].get<double>();
        ++averaged;
      }
    }
    ASSERT_GT(averaged, 100) << "peer " << i << " averaged with someone in most steps";
    EXPECT_GT(spread / averaged, 0.0);
    EXPECT_LT(spread / averaged, 0.05) << "the averaging keeps the replicas close";
    hashes.insert(last["model_hash"].get<std::string>());
  }
  EXPECT_GT(hashes.size(), 1u) << "gossip replicas are not identical";
}

}  // namespace
}  // namespace shoal::testing
