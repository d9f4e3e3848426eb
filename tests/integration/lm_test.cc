// The language model end to end with real processes on 127.0.0.1, on a text file the test
// writes: a federation trains a small GPT (held-out loss in nats per token and bits per byte
// falls), shoal-generate samples from its checkpoint, and peers train it in allgather (dense
// AdamW on the mean gradient, and DeMo) and DiLoCo with every replica's hash equal at every
// step and the held-out loss falling.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "harness.h"

namespace shoal::testing {
namespace {

using std::chrono::milliseconds;

constexpr const char* kModel = "gpt:layers=1,dim=32,heads=2,ctx=32";

// About 60 KB of English-like text with structure a tiny model can pick up.
std::string WriteText(const std::string& dir) {
  const std::string path = dir + "/text.txt";
  std::ofstream out(path);
  const char* subjects[] = {"the cat", "a dog", "the old man", "my sister", "the bird"};
  const char* verbs[] = {"sat on", "looked at", "walked to", "sang to", "slept by"};
  const char* objects[] = {"the mat.", "the river.", "a tree.", "the house.", "the moon."};
  for (int i = 0; i < 1500; ++i) out << subjects[i % 5] << ' ' << verbs[(i / 5) % 5] << ' ' << objects[(i / 25) % 5] << '\n';
  return path;
}

TEST(LanguageModel, AFederationTrainsAGptAndShoalGenerateSamplesIt) {
  const std::string dir = TempDir("lm-federated");
  const std::string text = WriteText(dir);
  const int port = FreePort();
  const std::string metrics = dir + "/metrics.jsonl";
  Process agg("shoal-aggregator",
              {"--listen", Endpoint(port), "--rounds", "5", "--min-clients", "2", "--model", kModel, "--dataset",
               "text:" + text, "--test-fraction", "0.1", "--client-optimizer", "adamw", "--lr", "0.005",
               "--local-steps", "25", "--batch-size", "8", "--seed", "4", "--metrics-out", metrics,
               "--checkpoint-dir", dir + "/ckpt", "--round-timeout", "60", "--log-level", "warn"},
              dir + "/agg", OneThreadEnv());
  std::vector<std::unique_ptr<Process>> clients;
  for (int i = 0; i < 2; ++i)
    clients.push_back(std::make_unique<Process>(
        "shoal-client",
        std::vector<std::string>{"--connect", Endpoint(port), "--dataset", "text:" + text, "--partition",
                                 std::to_string(i) + "/2", "--device", "cpu", "--log-level", "warn"},
        dir + "/c" + std::to_string(i), OneThreadEnv()));
  ASSERT_EQ(agg.Wait(milliseconds(180000)), 0) << agg.Stderr();
  ExpectAllExitZero(clients);
  const auto rounds = ReadJsonLines(metrics);
  ASSERT_EQ(rounds.size(), 5u);
  const double first = rounds.front()["test_loss"], last = rounds.back()["test_loss"];
  EXPECT_LT(first, std::log(256.0) + 0.1);
  EXPECT_LT(last, 0.6 * first) << first << " -> " << last << " nats per token";
  EXPECT_NEAR(rounds.back()["test_bits_per_byte"].get<double>(), last / std::log(2.0), 1e-9);

  Process gen("shoal-generate",
              {"--checkpoint", dir + "/ckpt/checkpoint.shoal", "--prompt", "the cat", "--tokens", "60", "--seed", "1"},
              dir + "/gen");
  ASSERT_EQ(gen.Wait(milliseconds(60000)), 0) << gen.Stderr();
  const std::string out = gen.Stdout();
  EXPECT_EQ(out.rfind("the cat", 0), 0u) << out;
  EXPECT_EQ(out.size(), std::string("the cat").size() + 60 + 1) << out;  // prompt, 60 bytes, newline
}

// Two peers on `text`, `task` flags on both; their per-step metrics.
std::vector<std::map<uint64_t, nlohmann::json>> RunPeers(const std::string& name, std::vector<std::string> task) {
  const std::string dir = TempDir(name);
  const std::string text = WriteText(dir);
  const int p0 = FreePort(), p1 = FreePort();
  task = Concat(task, {"--model", kModel, "--dataset", "text:" + text, "--test-fraction", "0.1", "--seed", "4",
                       "--batch-size", "8", "--min-peers", "2", "--eval-every", "1", "--step-timeout", "5",
                       "--heartbeat-interval", "0.1", "--heartbeat-timeout", "3", "--device", "cpu", "--log-level",
                       "warn"});
  std::vector<std::unique_ptr<Process>> peers;
  peers.push_back(std::make_unique<Process>(
      "shoal-peer",
      Concat(task, {"--listen", Endpoint(p0), "--name", "p0", "--partition", "0/2", "--metrics-out", dir + "/p0.jsonl"}),
      dir + "/p0", OneThreadEnv()));
  peers.push_back(std::make_unique<Process>(
      "shoal-peer",
      Concat(task, {"--listen", Endpoint(p1), "--name", "p1", "--partition", "1/2", "--peers", Endpoint(p0),
                    "--metrics-out", dir + "/p1.jsonl"}),
      dir + "/p1", OneThreadEnv()));
  for (auto& p : peers) EXPECT_EQ(p->Wait(milliseconds(180000)), 0) << p->Stderr();
  std::vector<std::map<uint64_t, nlohmann::json>> steps(2);
  for (int i = 0; i < 2; ++i)
    for (auto& line : ReadJsonLines(dir + "/p" + std::to_string(i) + ".jsonl")) steps[i][line["step"]] = line;
  return steps;
}

void ExpectOneModelThatLearns(const std::vector<std::map<uint64_t, nlohmann::json>>& steps, uint64_t total,
                              double factor) {
  ASSERT_EQ(steps[0].size(), total);
  ASSERT_EQ(steps[1].size(), total);
  for (const auto& [step, line] : steps[0]) EXPECT_EQ(steps[1].at(step)["model_hash"], line["model_hash"]) << step;
  const double first = steps[0].begin()->second["test_loss"], last = steps[0].rbegin()->second["test_loss"];
  EXPECT_LT(last, factor * first) << first << " -> " << last;
}

TEST(LanguageModel, PeersTrainAGptWithAdamWOnTheMeanGradient) {
  ExpectOneModelThatLearns(RunPeers("lm-allgather", {"--mode", "allgather", "--client-optimizer", "adamw", "--lr",
                                                     "0.01", "--steps", "40"}),
                           40, 0.7);
}

TEST(LanguageModel, PeersTrainAGptWithAdamWOnARingAllReduce) {
  ExpectOneModelThatLearns(RunPeers("lm-allreduce", {"--mode", "allreduce", "--client-optimizer", "adamw", "--lr",
                                                     "0.01", "--steps", "40"}),
                           40, 0.7);
}

TEST(LanguageModel, PeersTrainAGptWithDemo) {
  ExpectOneModelThatLearns(RunPeers("lm-demo", {"--mode", "allgather", "--client-optimizer", "demo", "--lr", "0.003",
                                                "--client-demo-topk", "8", "--client-demo-chunk", "32", "--codec",
                                                "demo:chunk=32,topk=8,bits=32", "--steps", "40"}),
                           40, 0.8);
}

TEST(LanguageModel, PeersTrainAGptWithDiloco) {
  ExpectOneModelThatLearns(RunPeers("lm-diloco", {"--mode", "diloco", "--client-optimizer", "adamw", "--lr", "0.005",
                                                  "--diloco-inner-steps", "20", "--steps", "4"}),
                           4, 0.7);
}

TEST(LanguageModel, PeersTrainAGptWithDilocoOnAnInt8RingAllReduce) {
  ExpectOneModelThatLearns(RunPeers("lm-diloco-ring", {"--mode", "diloco", "--diloco-allreduce", "--codec", "int8",
                                                       "--client-optimizer", "adamw", "--lr", "0.005",
                                                       "--diloco-inner-steps", "20", "--steps", "4"}),
                           4, 0.7);
}

// SparseLoCo-like: DiLoCo whose pseudo-gradients go out as error feedback + top-3% + int8.
TEST(LanguageModel, PeersTrainAGptWithSparseCompressedOuterSteps) {
  ExpectOneModelThatLearns(RunPeers("lm-sparseloco", {"--mode", "diloco", "--codec", "ef|topk:ratio=0.03|int8",
                                                      "--client-optimizer", "adamw", "--lr", "0.005",
                                                      "--diloco-inner-steps", "20", "--steps", "4"}),
                           4, 0.8);
}

}  // namespace
}  // namespace shoal::testing
