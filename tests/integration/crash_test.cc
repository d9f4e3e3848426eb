// Crash consistency (and, at the end, the same for asynchronous FedBuff): the aggregator is SIGKILLed at random moments (inside rounds, between
// them; one trial in five kills it inside a checkpoint write, see KillInsideACheckpointWrite)
// and restarted with --resume, 50 times, each in a run of
// its own with the same two client processes throughout. Every run must end with the model
// hash of an uninterrupted run and list each round exactly once in its metrics. The run uses
// every piece of state a resume must restore: a stateful server optimizer (fedadam's moments),
// a lossy download codec with error feedback (its residual), and clients whose replicas may be
// a round ahead of the checkpoint (a round committed, then killed before the checkpoint).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "core/rng.h"
#include "harness.h"

namespace shoal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr int kRounds = 5;

std::vector<std::string> Args(int port, const std::string& dir) {
  auto args = AggregatorArgs(port, kRounds, 2, dir + "/run.jsonl");
  for (auto [flag, value] : {std::pair{"--model", "mlp:256,256"}, {"--strategy", "fedadam"}, {"--codec", "int8"},
                             {"--codec-down", "ef|topk:ratio=0.2|int8"}, {"--log-level", "warn"}})
    SetFlag(args, flag, value);
  args.push_back("--checkpoint-dir");
  args.push_back(dir + "/ckpt");
  args.push_back("--resume");  // with no checkpoint yet, starts at round 1
  return args;
}

std::vector<std::unique_ptr<Process>> Clients(int port, const std::string& dir, int count = 2) {
  std::vector<std::unique_ptr<Process>> out;
  for (int i = 0; i < count; ++i) {
    auto args = ClientArgs(port, i, count);
    SetFlag(args, "--reconnect-timeout", "60");
    out.push_back(std::make_unique<Process>("shoal-client", args, dir + "/client" + std::to_string(i), OneThreadEnv()));
  }
  return out;
}

// SIGKILLs `agg` if it still runs; whether it died of that (it may have finished on its own
// between Running() and the signal).
bool KillIfRunning(Process& agg) {
  if (agg.Running()) {
    agg.Signal(SIGKILL);
    const int rc = agg.Wait(seconds(10));
    EXPECT_TRUE(rc == 128 + SIGKILL || rc == 0) << rc;
  }
  return agg.Wait(seconds(0)) == 128 + SIGKILL;
}

// Kills `agg` inside a later checkpoint write, at a byte drawn from `rng`, and leaves on disk
// what such a crash leaves: the previous checkpoint, and a temporary file holding a prefix of
// the new one. How: once the first checkpoint exists, the temporary file's name is taken by a
// FIFO, so the aggregator's next write blocks on it while this test reads; after `cut` bytes
// the aggregator is killed inside write(2) (a timed kill finds the window of a fast write only
// by luck), and the FIFO is replaced by a regular file of the bytes read. True if it was killed
// so; false if the run ended first.
bool KillInsideACheckpointWrite(Process& agg, const std::string& ckpt_dir, Rng& rng) {
  const std::string done = ckpt_dir + "/checkpoint.shoal", tmp = done + ".tmp";
  const auto until = Clock::now() + seconds(60);
  // A write in progress holds the name: wait until it is free, then take it.
  while (!std::filesystem::exists(done) || ::mkfifo(tmp.c_str(), 0600) != 0) {
    if (!agg.Running() || Clock::now() > until) return false;
    ::usleep(200);
  }
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {  // free the name, or the aggregator's next write would wait for a reader forever
    ADD_FAILURE() << tmp << ": cannot open the FIFO";
    std::filesystem::remove(tmp);
    return false;
  }
  const size_t cut = 1 + static_cast<size_t>(rng.UniformDouble() * 300000);  // the whole file is ~1 MB
  std::string prefix;
  while (prefix.size() < cut && agg.Running() && Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[65536];
    const ssize_t n = ::read(fd, buf, std::min(sizeof(buf), cut - prefix.size()));
    if (n > 0) prefix.append(buf, static_cast<size_t>(n));
  }
  const bool inside = prefix.size() == cut && KillIfRunning(agg);
  ::close(fd);
  std::filesystem::remove(tmp);
  std::ofstream(tmp, std::ios::binary) << prefix;
  return inside;
}

// Each round 1..kRounds exactly once, in order; the last line's model hash.
std::string FinalHash(const std::string& metrics) {
  auto lines = ReadJsonLines(metrics);
  EXPECT_EQ(lines.size(), static_cast<size_t>(kRounds)) << metrics;
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["round"], i + 1) << metrics;
  return lines.empty() ? "" : lines.back()["model_hash"].get<std::string>();
}

TEST(Crash, FiftySigkillsEachEndWithTheUninterruptedModel) {
  const std::string base = TempDir("crash");
  // The uninterrupted run, timed: kills are drawn over its length.
  std::string reference;
  double run_ms = 0;
  {
    const std::string dir = base + "/reference";
    std::filesystem::create_directories(dir);
    const int port = FreePort();
    const auto t0 = Clock::now();
    Process agg("shoal-aggregator", Args(port, dir), dir + "/agg", OneThreadEnv());
    auto clients = Clients(port, dir);
    ASSERT_EQ(agg.Wait(seconds(120)), 0) << agg.Stderr();
    run_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ExpectAllExitZero(clients);
    reference = FinalHash(dir + "/run.jsonl");
    ASSERT_FALSE(reference.empty());
  }
  Rng rng(20261204);
  int killed = 0, aimed = 0, by_chance = 0;  // the last two: killed inside a checkpoint write
  for (int trial = 0; trial < 50; ++trial) {
    const std::string dir = base + "/trial" + std::to_string(trial);
    std::filesystem::create_directories(dir);
    const int port = FreePort();
    auto agg = std::make_unique<Process>("shoal-aggregator", Args(port, dir), dir + "/agg1", OneThreadEnv());
    auto clients = Clients(port, dir);
    bool was_killed = false;
    if (trial % 5 == 4) {
      was_killed = KillInsideACheckpointWrite(*agg, dir + "/ckpt", rng);
      aimed += was_killed;
    } else {
      // Over the first 60 % of the reference's length: the reference, the first run, pays the
      // cold start (binaries and data not yet in the page cache), and a trial ends sooner.
      ::usleep(static_cast<useconds_t>(rng.UniformDouble() * 0.6 * run_ms * 1000));
      was_killed = KillIfRunning(*agg);
      by_chance += was_killed && std::filesystem::exists(dir + "/ckpt/checkpoint.shoal.tmp");
    }
    if (was_killed) {
      ++killed;
      agg = std::make_unique<Process>("shoal-aggregator", Args(port, dir), dir + "/agg2", OneThreadEnv());
    }
    ASSERT_EQ(agg->Wait(seconds(120)), 0) << "trial " << trial << ": " << agg->Stderr();
    ExpectAllExitZero(clients);
    EXPECT_EQ(FinalHash(dir + "/run.jsonl"), reference) << "trial " << trial;
  }
  // Killed after the last round's checkpoint, before its Bye reached the clients: the resumed
  // aggregator has no round left, and must still tell the clients that come back that the run
  // is over (not exit at once and leave them to their reconnect timeout).
  {
    const std::string dir = base + "/finished";
    std::filesystem::create_directories(dir);
    std::filesystem::copy(base + "/reference/ckpt", dir + "/ckpt");
    std::filesystem::copy_file(base + "/reference/run.jsonl", dir + "/run.jsonl");
    const int port = FreePort();
    auto clients = Clients(port, dir);
    Process agg("shoal-aggregator", Args(port, dir), dir + "/agg", OneThreadEnv());
    EXPECT_EQ(agg.Wait(seconds(30)), 0) << agg.Stderr();
    for (auto& c : clients) {
      EXPECT_EQ(c->Wait(seconds(10)), 0) << c->Stderr();
      EXPECT_NE(c->Stderr().find("training finished after 5 rounds"), std::string::npos) << c->Stderr();
    }
    EXPECT_EQ(FinalHash(dir + "/run.jsonl"), reference);
  }
  // Most draws land before the run ends, and each of the 10 aimed at a checkpoint write lands
  // inside one: the resumed runs above start beside a torn temporary file.
  EXPECT_GE(killed, 35);
  EXPECT_EQ(aimed, 10) << "kills inside a checkpoint write";
  std::printf("crash: %d of 50 trials killed the aggregator mid-run, %d of them inside a checkpoint write (%d aimed, "
              "%d by chance)\n",
              killed, aimed + by_chance, aimed, by_chance);
}

// Client state across a crash: the aggregator, with a task whose clients carry state from
// round to round, is SIGKILLed mid-run `trials` times and resumed; each run must end with the
// uninterrupted run's model. Returns the trials killed and those in which a client took a
// round back (runtime/client/journal.h).
struct ClientStateTrials {
  int killed = 0, took_back = 0;
};
ClientStateTrials RunClientStateTrials(const std::string& name, const std::vector<std::pair<std::string, std::string>>& task,
                                       int rounds, int trials, uint64_t seed) {
  const std::string base = TempDir(name);
  auto args = [&](int port, const std::string& dir) {
    auto a = AggregatorArgs(port, rounds, 3, dir + "/run.jsonl");
    SetFlag(a, "--model", "mlp:256,256");
    SetFlag(a, "--log-level", "warn");
    for (const auto& [flag, value] : task) SetFlag(a, flag, value);
    a.insert(a.end(), {"--checkpoint-dir", dir + "/ckpt", "--resume"});
    return a;
  };
  auto clients = [](int port, const std::string& dir) { return Clients(port, dir, 3); };
  auto final_hash = [&](const std::string& metrics) {
    const auto lines = ReadJsonLines(metrics);
    EXPECT_EQ(lines.size(), static_cast<size_t>(rounds)) << metrics;
    for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["round"], i + 1) << metrics;
    return lines.empty() ? std::string() : lines.back()["model_hash"].get<std::string>();
  };
  ClientStateTrials out;
  std::string reference;
  {
    const std::string dir = base + "/reference";
    std::filesystem::create_directories(dir);
    const int port = FreePort();
    Process agg("shoal-aggregator", args(port, dir), dir + "/agg", OneThreadEnv());
    auto cs = clients(port, dir);
    EXPECT_EQ(agg.Wait(seconds(120)), 0) << agg.Stderr();
    ExpectAllExitZero(cs);
    reference = final_hash(dir + "/run.jsonl");
    if (reference.empty()) return out;
  }
  Rng rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    SCOPED_TRACE(name + " trial " + std::to_string(trial));
    const std::string dir = base + "/trial" + std::to_string(trial);
    std::filesystem::create_directories(dir);
    const int port = FreePort();
    auto agg = std::make_unique<Process>("shoal-aggregator", args(port, dir), dir + "/agg1", OneThreadEnv());
    auto cs = clients(port, dir);
    // After a random round k in [2, rounds - 3], up to 30 ms later: inside a round (most of a
    // round is the clients training and uploading), at its close, or between rounds.
    const size_t k = 2 + static_cast<size_t>(rng.Below(rounds - 4));
    EXPECT_TRUE(WaitFor([&] { return ReadJsonLines(dir + "/run.jsonl").size() >= k || !agg->Running(); }, seconds(60)));
    ::usleep(static_cast<useconds_t>(rng.UniformDouble() * 30000));
    if (KillIfRunning(*agg)) {
      ++out.killed;
      agg = std::make_unique<Process>("shoal-aggregator", args(port, dir), dir + "/agg2", OneThreadEnv());
    }
    EXPECT_EQ(agg->Wait(seconds(120)), 0) << agg->Stderr();
    ExpectAllExitZero(cs);
    EXPECT_EQ(final_hash(dir + "/run.jsonl"), reference);
    bool any = false;
    for (auto& c : cs) any |= c->Stderr().find("returns to its state before round") != std::string::npos;
    out.took_back += any;
  }
  return out;
}

// The configuration: error feedback on both sides, the clients' residuals included.
// Before the clients took rounds back, 0 of 8 trials ended with the reference model.
TEST(Crash, ClientErrorFeedbackFollowsTheAggregatorBackToItsCheckpoint) {
  const auto r = RunClientStateTrials("crash-ef", {{"--codec", "ef|topk:ratio=0.05|int8"},
                                                   {"--codec-down", "ef|topk:ratio=0.05|int8"}},
                                      30, 8, 20261206);
  EXPECT_GE(r.killed, 7);
  EXPECT_GE(r.took_back, 3) << "most kills land inside a round, after some client uploaded it";
  std::printf("crash (client error feedback): %d of 8 trials killed the aggregator mid-run, %d of them took a round "
              "back on a client; every run ended with the uninterrupted model\n",
              r.killed, r.took_back);
}

// DeMo: the clients' momentum lives from round to round in their trainers (Trainer::SaveState).
TEST(Crash, ClientDemoMomentumFollowsTheAggregatorBackToItsCheckpoint) {
  const auto r = RunClientStateTrials("crash-demo", {{"--client-optimizer", "demo"}, {"--strategy", "demo"},
                                                     {"--local-steps", "1"}, {"--codec-down", "ef|topk:ratio=0.05|int8"}},
                                      20, 4, 20261207);
  EXPECT_GE(r.killed, 3);
  EXPECT_GE(r.took_back, 1);
  std::printf("crash (client DeMo momentum): %d of 4 trials killed the aggregator mid-run, %d of them took a round "
              "back on a client; every run ended with the uninterrupted model\n",
              r.killed, r.took_back);
}

// The same trial for asynchronous FedBuff, 10 times: 3 client processes, commits of 2, the
// issue's error-feedback upload codec. Which updates make a commit depends on timing, so there
// is no reference hash; instead each resumed aggregator must start from exactly the model of
// the last commit its metrics keep (the hash it logs on resume), every run ends with each
// commit listed once, and an acknowledged update that died in the buffer with the aggregator
// comes back into its client's residual (runtime/client/journal.h): before commits were
// settled per client, a client dropped it once acknowledged.
TEST(Crash, FedBuffResumesFromItsLastCommitAfterEachSigkill) {
  constexpr int kCommits = 30;
  const std::string base = TempDir("crash-fedbuff");
  auto args = [](int port, const std::string& dir) {
    auto a = AggregatorArgs(port, kCommits, 3, dir + "/run.jsonl");
    for (auto [flag, value] : {std::pair{"--model", "mlp:256,256"}, {"--strategy", "fedbuff"}, {"--buffer-size", "2"},
                               {"--max-staleness", "3"}, {"--codec", "ef|topk:ratio=0.05|int8"},
                               {"--codec-down", "ef|topk:ratio=0.2|int8"}})
      SetFlag(a, flag, value);
    a.insert(a.end(), {"--checkpoint-dir", dir + "/ckpt", "--resume"});
    return a;
  };
  Rng rng(20261205);
  int killed = 0, resumed_checked = 0, returned = 0;
  for (int trial = 0; trial < 10; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const std::string dir = base + "/trial" + std::to_string(trial);
    std::filesystem::create_directories(dir);
    const int port = FreePort();
    auto agg = std::make_unique<Process>("shoal-aggregator", args(port, dir), dir + "/agg1", OneThreadEnv());
    auto clients = Clients(port, dir, 3);
    // After a random commit k in [2, 27], up to 20 ms later: mid-run, inside a commit, between
    // commits or during a checkpoint write (commit 1's checkpoint is written by then).
    const size_t k = 2 + static_cast<size_t>(rng.Below(kCommits - 4));
    ASSERT_TRUE(WaitFor([&] { return ReadJsonLines(dir + "/run.jsonl").size() >= k || !agg->Running(); }, seconds(60)));
    ::usleep(static_cast<useconds_t>(rng.UniformDouble() * 20000));
    if (KillIfRunning(*agg)) {
      ++killed;
      agg = std::make_unique<Process>("shoal-aggregator", args(port, dir), dir + "/agg2", OneThreadEnv());
    }
    ASSERT_EQ(agg->Wait(seconds(120)), 0) << agg->Stderr();
    ExpectAllExitZero(clients);
    bool any = false;
    for (auto& c : clients) {
      any |= c->Stderr().find("the aggregator died before a commit it saved held it") != std::string::npos;
      EXPECT_EQ(c->Stderr().find("its work is lost"), std::string::npos) << c->Stderr();
    }
    returned += any;
    const auto lines = ReadJsonLines(dir + "/run.jsonl");
    ASSERT_EQ(lines.size(), static_cast<size_t>(kCommits));
    for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["round"], i + 1);
    const std::string err = agg->Stderr();
    const size_t from = err.find("resumed from ");
    if (from == std::string::npos) continue;  // not killed, or killed before its first checkpoint
    const size_t at = err.find(" at round ", from);
    ASSERT_NE(at, std::string::npos) << err;
    const size_t resumed = std::stoul(err.substr(at + 10));
    const size_t hash_at = err.find("model_hash ", at);
    ASSERT_NE(hash_at, std::string::npos) << err;
    ASSERT_GE(resumed, 1u);
    ASSERT_LE(resumed, lines.size());
    EXPECT_EQ(err.substr(hash_at + 11, 64), lines[resumed - 1]["model_hash"].get<std::string>())
        << "the resumed model is the last kept commit's";
    ++resumed_checked;
  }
  EXPECT_GE(killed, 8);
  EXPECT_EQ(resumed_checked, killed) << "every kill came after a checkpoint, so every restart resumed one";
  EXPECT_GE(returned, 1) << "a kill with an acknowledged update in the buffer returns it to its client's residual";
  std::printf("crash (fedbuff): %d of 10 trials killed the aggregator mid-run; each resumed its last commit's model; in "
              "%d a client took back an update that died in the buffer\n",
              killed, returned);
}

}  // namespace
}  // namespace shoal::testing
