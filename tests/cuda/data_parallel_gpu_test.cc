// Data-parallel ranks on GPUs (issue 19): the NCCL group (kernels/nccl_group.cc) over every
// device sums known vectors to the exact result on every rank and broadcasts; a client on
// every GPU (--gpus D) takes part in a federation like a CPU client (with one GPU, a one-rank
// client: the NCCL path needs two). Skips, saying why, without a usable CUDA device.
#include <gtest/gtest.h>

#include <thread>

#include "backend/backend.h"
#include "backend/collective.h"
#include "cuda_backend.h"
#include "harness.h"

namespace shoal::testing {
namespace {

using std::chrono::seconds;

// With one device the group would be one rank, whose all-reduce is the identity: the test
// needs two. (NCCL itself refuses two ranks of one communicator on one device, "Duplicate GPU
// detected", so one GPU cannot stand in for two.)
TEST(CudaDataParallel, NcclGroupSumsAndBroadcastsOnEveryRank) {
  auto count = cuda::DeviceCount();
  if (!count.ok() || *count == 0) GTEST_SKIP() << "no CUDA device: " << (count.ok() ? "0" : count.status().message());
  if (*count < 2) GTEST_SKIP() << "needs >= 2 GPUs (found 1): one rank's all-reduce is the identity";
  const int ranks = *count;
  std::vector<std::string> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back("cuda:" + std::to_string(r));
  auto group = MakeCollectiveGroup(devices);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  const size_t n = 100003;
  std::vector<std::vector<float>> out(static_cast<size_t>(ranks), std::vector<float>(n));
  std::vector<Status> status(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto backend = MakeBackend(devices[static_cast<size_t>(r)]);
      if (!backend.ok()) {
        status[static_cast<size_t>(r)] = backend.status();
        return;
      }
      // Small integers: every order of summation gives the exact sum.
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * (r + 1)) % 1000) - 500.0f;
      DeviceArray<float> d(backend->get(), n);
      d.Upload(x.data(), n);
      Status st = (*group)[static_cast<size_t>(r)]->AllReduceSum(std::span<float>(d.get(), n));
      if (st.ok()) d.Download(out[static_cast<size_t>(r)].data(), n);
      // Then rank 0's vector to everyone.
      if (st.ok()) {
        for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(r * 1000 + i % 17);
        d.Upload(x.data(), n);
        st = (*group)[static_cast<size_t>(r)]->Broadcast(std::span<float>(d.get(), n), 0);
        std::vector<float> b(n);
        if (st.ok()) d.Download(b.data(), n);
        for (size_t i = 0; st.ok() && i < n; ++i)
          if (b[i] != static_cast<float>(i % 17)) st = Status::Internal("broadcast differs at " + std::to_string(i));
      }
      status[static_cast<size_t>(r)] = st;
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) ASSERT_TRUE(status[static_cast<size_t>(r)].ok()) << status[static_cast<size_t>(r)].ToString();
  for (size_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < ranks; ++r) want += static_cast<double>((i * (r + 1)) % 1000) - 500.0;
    for (int r = 0; r < ranks; ++r) ASSERT_EQ(out[static_cast<size_t>(r)][i], static_cast<float>(want)) << r << " " << i;
  }
}

TEST(CudaDataParallel, AClientOnEveryGpuTrainsTheFederation) {
  auto count = cuda::DeviceCount();
  if (!count.ok() || *count == 0) GTEST_SKIP() << "no CUDA device: " << (count.ok() ? "0" : count.status().message());
  const std::string dir = TempDir("gpus");
  const int port = FreePort();
  Process agg("shoal-aggregator", AggregatorArgs(port, 5, 2, dir + "/run.jsonl"), dir + "/agg", OneThreadEnv());
  Process gpus("shoal-client", Concat(ClientArgs(port, 0, 2), {"--gpus", std::to_string(*count)}), dir + "/gpus",
               OneThreadEnv());
  auto cpu_args = ClientArgs(port, 1, 2);
  Process cpu("shoal-client", cpu_args, dir + "/cpu", OneThreadEnv());
  ASSERT_EQ(agg.Wait(seconds(300)), 0) << agg.Stderr();
  EXPECT_EQ(gpus.Wait(seconds(30)), 0) << gpus.Stderr();
  EXPECT_EQ(cpu.Wait(seconds(30)), 0) << cpu.Stderr();
  EXPECT_NE(gpus.Stderr().find("backend cuda"), std::string::npos) << gpus.Stderr();
  const auto lines = ReadJsonLines(dir + "/run.jsonl");
  ASSERT_EQ(lines.size(), 5u);
  for (const auto& line : lines) EXPECT_EQ(line["clients_reported"], 2);
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), 0.8);
}

}  // namespace
}  // namespace shoal::testing
