// A federated run with two clients on CUDA and two on the CPU converges like an all-CPU run
// (real processes on 127.0.0.1). Skips, saying why, without a usable CUDA device.
#include <gtest/gtest.h>

#include "cuda_backend.h"
#include "harness.h"

namespace shoal::testing {
namespace {

using std::chrono::seconds;

std::vector<nlohmann::json> RunRounds(const std::string& dir, const std::vector<std::string>& devices) {
  const int port = FreePort();
  Process agg("shoal-aggregator", AggregatorArgs(port, 10, static_cast<int>(devices.size()), dir + "/run.jsonl"),
              dir + "/agg", OneThreadEnv());
  std::vector<std::unique_ptr<Process>> clients;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto args = ClientArgs(port, static_cast<int>(i), static_cast<int>(devices.size()));
    SetFlag(args, "--device", devices[i]);
    clients.push_back(std::make_unique<Process>("shoal-client", args, dir + "/client" + std::to_string(i), OneThreadEnv()));
  }
  EXPECT_EQ(agg.Wait(seconds(300)), 0) << agg.Stderr();
  ExpectAllExitZero(clients);
  for (size_t i = 0; i < devices.size(); ++i)
    EXPECT_NE(clients[i]->Stderr().find("backend " + std::string(devices[i] == "cpu" ? "cpu" : "cuda")),
              std::string::npos)
        << clients[i]->Stderr();
  return ReadJsonLines(dir + "/run.jsonl");
}

TEST(FederatedGpu, TwoCudaAndTwoCpuClientsConvergeLikeAllCpu) {
  auto n = cuda::DeviceCount();
  if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status().message();
  const auto cpu = RunRounds(TempDir("all-cpu"), {"cpu", "cpu", "cpu", "cpu"});
  const auto mixed = RunRounds(TempDir("mixed"), {"cuda", "cuda", "cpu", "cpu"});
  ASSERT_EQ(cpu.size(), 10u);
  ASSERT_EQ(mixed.size(), 10u);
  for (size_t r = 0; r < cpu.size(); ++r) EXPECT_EQ(mixed[r]["clients_reported"], 4);
  // cuBLAS and OpenBLAS sum in different orders, so the models differ in their last bits; the
  // learning curve must not.
  EXPECT_GT(mixed.back()["test_accuracy"].get<double>(), 0.85);
  EXPECT_NEAR(mixed.back()["test_accuracy"].get<double>(), cpu.back()["test_accuracy"].get<double>(), 0.02);
  EXPECT_NEAR(mixed.back()["test_loss"].get<double>(), cpu.back()["test_loss"].get<double>(),
              0.1 * cpu.back()["test_loss"].get<double>());
}

}  // namespace
}  // namespace shoal::testing
