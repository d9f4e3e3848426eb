// Hierarchical aggregation (shoal-aggregator --upstream): real processes on 127.0.0.1. A tree
// of 1 root, 3 edge aggregators and 12 clients gives, round after round, the model hash of a
// flat federation of the same 12 clients (the partial sums are exact, and the edges relay
// the root's task and download deltas unchanged); an edge killed and restarted rejoins its
// parent, its clients rejoin it, and the run goes on to its end.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>

#include "harness.h"

namespace shoal::testing {
namespace {

using std::chrono::seconds;

constexpr int kClients = 12, kEdges = 3, kRounds = 8;

// The task of both runs: a lossy upload codec (decoded by whoever receives the update) and a
// lossy download codec with error feedback (its delta is relayed by the edges as it came).
std::vector<std::string> RootArgs(int port, int rounds, int min_clients, const std::string& dir) {
  auto args = AggregatorArgs(port, rounds, min_clients, dir + "/root.jsonl");
  for (auto [flag, value] : {std::pair{"--codec", "int8"}, {"--codec-down", "ef|topk:ratio=0.3|int8"}, {"--model", "mlp:32"}})
    SetFlag(args, flag, value);
  return args;
}

std::vector<std::string> EdgeArgs(int port, int parent, int index, int min_clients, const std::string& dir) {
  return {"--listen", Endpoint(port), "--upstream", Endpoint(parent), "--upstream-name", "edge" + std::to_string(index),
          "--min-clients", std::to_string(min_clients), "--metrics-out", dir + "/edge" + std::to_string(index) + ".jsonl",
          "--round-timeout", "20", "--heartbeat-interval", "0.2", "--heartbeat-timeout", "2", "--log-level", "info"};
}

// Client i of kClients, named c<i> (the name seeds its codec's randomness: the same in both runs).
std::unique_ptr<Process> StartClient(int port, int i, const std::string& dir) {
  auto args = Concat(ClientArgs(port, i, kClients), {"--name", "c" + std::to_string(i)});
  return std::make_unique<Process>("shoal-client", args, dir + "/c" + std::to_string(i), OneThreadEnv());
}

std::vector<std::string> Hashes(const std::string& metrics) {
  std::vector<std::string> out;
  for (const auto& line : ReadJsonLines(metrics)) out.push_back(line["model_hash"].get<std::string>());
  return out;
}

TEST(Tiers, ATwoTierTreeGivesTheFlatFederationsModelEveryRound) {
  const std::string flat_dir = TempDir("tiers-flat"), tree_dir = TempDir("tiers-tree");
  std::vector<std::string> flat;
  {
    const int port = FreePort();
    Process root("shoal-aggregator", RootArgs(port, kRounds, kClients, flat_dir), flat_dir + "/root", OneThreadEnv());
    std::vector<std::unique_ptr<Process>> clients;
    for (int i = 0; i < kClients; ++i) clients.push_back(StartClient(port, i, flat_dir));
    ASSERT_EQ(root.Wait(seconds(180)), 0) << root.Stderr();
    ExpectAllExitZero(clients);
    flat = Hashes(flat_dir + "/root.jsonl");
    ASSERT_EQ(flat.size(), static_cast<size_t>(kRounds));
  }
  const int port = FreePort();
  Process root("shoal-aggregator", RootArgs(port, kRounds, kEdges, tree_dir), tree_dir + "/root", OneThreadEnv());
  std::vector<std::unique_ptr<Process>> edges, clients;
  std::vector<int> edge_ports;
  for (int e = 0; e < kEdges; ++e) {
    edge_ports.push_back(FreePort());
    edges.push_back(std::make_unique<Process>("shoal-aggregator", EdgeArgs(edge_ports[e], port, e, kClients / kEdges, tree_dir),
                                              tree_dir + "/edge" + std::to_string(e), OneThreadEnv()));
  }
  for (int i = 0; i < kClients; ++i) clients.push_back(StartClient(edge_ports[i % kEdges], i, tree_dir));
  ASSERT_EQ(root.Wait(seconds(180)), 0) << root.Stderr();
  ExpectAllExitZero(edges);  // the root's Bye ends each edge, which says Bye to its clients
  ExpectAllExitZero(clients);

  const auto lines = ReadJsonLines(tree_dir + "/root.jsonl");
  ASSERT_EQ(lines.size(), static_cast<size_t>(kRounds));
  for (int r = 0; r < kRounds; ++r) {
    EXPECT_EQ(lines[r]["model_hash"], flat[r]) << "round " << r + 1;
    EXPECT_EQ(lines[r]["clients_reported"], kEdges) << "round " << r + 1;
    EXPECT_EQ(lines[r]["updates_via_edges"], kClients) << "round " << r + 1;
  }
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), 0.7);
  for (int e = 0; e < kEdges; ++e) {  // each edge ran the root's rounds with its own clients
    const auto edge = ReadJsonLines(tree_dir + "/edge" + std::to_string(e) + ".jsonl");
    ASSERT_EQ(edge.size(), static_cast<size_t>(kRounds)) << "edge " << e;
    for (int r = 0; r < kRounds; ++r) {
      EXPECT_EQ(edge[r]["round"], r + 1);
      EXPECT_EQ(edge[r]["clients_reported"], kClients / kEdges);
    }
  }
}

TEST(Tiers, AnEdgeKilledAndRestartedRejoinsAndTheRunGoesOn) {
  const std::string dir = TempDir("tiers-restart");
  const int port = FreePort(), rounds = 10;
  auto root_args = RootArgs(port, rounds, 2, dir);
  SetFlag(root_args, "--round-timeout", "4");  // a round without the dead edge closes without it
  Process root("shoal-aggregator", root_args, dir + "/root", OneThreadEnv());
  const int p0 = FreePort(), p1 = FreePort();
  auto edge0 = std::make_unique<Process>("shoal-aggregator", EdgeArgs(p0, port, 0, 2, dir), dir + "/edge0", OneThreadEnv());
  auto edge1 = std::make_unique<Process>("shoal-aggregator", EdgeArgs(p1, port, 1, 2, dir), dir + "/edge1a", OneThreadEnv());
  std::vector<std::unique_ptr<Process>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(StartClient(i < 2 ? p0 : p1, i, dir));

  const std::string metrics = dir + "/root.jsonl";
  ASSERT_TRUE(WaitFor([&] { return ReadJsonLines(metrics).size() >= 2; }, seconds(60))) << root.Stderr();
  edge1->Signal(SIGKILL);
  EXPECT_EQ(edge1->Wait(seconds(10)), 128 + SIGKILL);
  ::sleep(3);  // the root and edge1's clients notice; rounds go on with edge0 alone
  edge1 = std::make_unique<Process>("shoal-aggregator", EdgeArgs(p1, port, 1, 2, dir), dir + "/edge1b", OneThreadEnv());

  ASSERT_EQ(root.Wait(seconds(180)), 0) << root.Stderr();
  ExpectAllExitZero(clients);
  EXPECT_EQ(edge0->Wait(seconds(30)), 0) << edge0->Stderr();
  EXPECT_EQ(edge1->Wait(seconds(30)), 0) << edge1->Stderr();
  const auto lines = ReadJsonLines(metrics);
  ASSERT_EQ(lines.size(), static_cast<size_t>(rounds));
  // Once back, the restarted edge's clients are in the root's rounds again: the last round
  // has every client's update.
  EXPECT_EQ(lines.back()["clients_reported"], 2);
  EXPECT_EQ(lines.back()["updates_via_edges"], 4);
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), 0.8);
  const auto restarted = ReadJsonLines(dir + "/edge1.jsonl");  // the restarted edge's own rounds
  ASSERT_FALSE(restarted.empty());
  EXPECT_EQ(restarted.back()["round"], rounds);
}

}  // namespace
}  // namespace shoal::testing
