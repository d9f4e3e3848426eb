// Aggregator memory and Add throughput of the streaming, exact FedAvg accumulator
// (aggregator::MakeStrategy("fedavg") -> StartRound -> Add(ClientUpdate) x K -> Finish) for a
// model of N floats (default 10,000,000: a ~10M-parameter model, 40 MB of fp32).
//
// Each K (default 10, 100, 1000 updates) runs in its own forked process, so each peak RSS
// (getrusage ru_maxrss) is that K's alone. The updates reuse ONE buffer, as the service decodes
// one update at a time: before each Add the buffer is refilled with fresh pseudo-random values
// (outside the timed region) and a weight in [1, 1000] is drawn. The baseline, in another forked
// process on the same data, is a plain float loop  sum[i] += w * x[i]  over the same N floats;
// the ratio is the accumulator's floats/s over the plain loop's floats/s.
//
// The old approach (keep every decoded update until the round closes) would hold K x N floats:
// that is printed as arithmetic (K x 4N bytes), not run.
//
// Output: one line per K and one for the baseline:
//   K  adds_done  peak_rss_MB  (process before StartRound)  add_s_mean  floats/s  x_plain  old_MB
// Run: build/bin/accumulator_memory_bench [K ...]
//   SHOAL_BENCH_FLOATS=N          model size (default 10000000)
//   SHOAL_BENCH_MAX_SECONDS=S     stop a K's Adds after S seconds of Adds (default 900) and say so;
//                                 the time per Add then extrapolates to the full K.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "aggregate/strategy.h"

namespace shoal {
namespace {

using Clock = std::chrono::steady_clock;

size_t EnvSize(const char* name, size_t dflt) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<size_t>(std::strtoull(v, nullptr, 10)) : dflt;
}

double MaxRssMB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double CurrentRssMB() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// Deterministic per-Add data: values ~ +-0.01 with a spread of exponents, like a model delta.
struct XorShift {
  uint64_t s;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

void Fill(std::vector<float>& x, uint64_t seed) {
  XorShift r{seed * 0x9E3779B97F4A7C15ull + 1};
  for (auto& v : x) {
    const uint64_t b = r.Next();
    // uniform in (-1, 1) scaled by 2^-(0..15) * 0.01
    const float u = static_cast<float>(static_cast<int32_t>(b >> 32)) * (1.0f / 2147483648.0f);
    v = u * 0.01f / static_cast<float>(1u << (b & 15));
  }
}

uint64_t Weight(uint64_t k) { return 1 + (k * 2654435761u) % 1000; }

// One K in this (child) process. Prints one line; returns the exit status.
int RunAccumulator(size_t n, size_t k, double max_seconds) {
  std::vector<float> global(n, 0.0f);
  std::vector<float> update(n);
  Fill(update, 0);  // touch the buffer so it counts in the "before" RSS
  const double before_mb = CurrentRssMB();

  aggregator::StrategyOptions so;
  so.name = "fedavg";
  auto strategy = aggregator::MakeStrategy(so);
  if (!strategy.ok()) {
    std::fprintf(stderr, "MakeStrategy: %s\n", strategy.status().message().c_str());
    return 1;
  }
  auto acc = (*strategy)->StartRound(1, global);

  double add_seconds = 0.0;
  size_t done = 0;
  for (; done < k; ++done) {
    if (add_seconds >= max_seconds) break;
    Fill(update, done + 1);
    aggregator::ClientUpdate u;
    u.client = "c";
    u.client_id = static_cast<uint32_t>(done);
    u.num_examples = Weight(done);
    u.delta = update;
    const auto t0 = Clock::now();
    Status s = acc->Add(u);
    add_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    if (!s.ok()) {
      std::fprintf(stderr, "Add %zu: %s\n", done, s.message().c_str());
      return 1;
    }
  }
  const auto t0 = Clock::now();
  auto mean = acc->Finish({});
  const double finish_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!mean.ok() || !mean->has_value()) {
    std::fprintf(stderr, "Finish failed\n");
    return 1;
  }
  volatile float sink = (**mean)[n / 2];
  (void)sink;
  const double per_add = add_seconds / static_cast<double>(done);
  const double old_mb = static_cast<double>(k) * static_cast<double>(n) * 4.0 / 1e6;
  std::printf("accumulator K=%-5zu adds_done=%-5zu peak_rss_MB=%-8.1f before_start_MB=%-7.1f add_s=%-8.4f "
              "finish_s=%-7.3f floats_per_s=%.3e extrapolated_K_adds_s=%.1f old_materialized_MB=%.0f%s\n",
              k, done, MaxRssMB(), before_mb, per_add, finish_seconds, static_cast<double>(n) / per_add,
              per_add * static_cast<double>(k), old_mb, done < k ? "  (CUT: time limit)" : "");
  std::fflush(stdout);
  return 0;
}

// Baseline: a plain float weighted sum over the same data, `passes` times.
int RunPlain(size_t n, size_t passes) {
  std::vector<float> update(n);
  std::vector<float> sum(n, 0.0f);
  double seconds = 0.0;
  for (size_t p = 0; p < passes; ++p) {
    Fill(update, p + 1);
    const float w = static_cast<float>(Weight(p));
    const auto t0 = Clock::now();
    float* __restrict s = sum.data();
    const float* __restrict x = update.data();
    for (size_t i = 0; i < n; ++i) s[i] += w * x[i];
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  volatile float sink = sum[n / 2];
  (void)sink;
  const double per_pass = seconds / static_cast<double>(passes);
  std::printf("plain_float_sum passes=%-4zu peak_rss_MB=%-8.1f add_s=%-8.4f floats_per_s=%.3e\n", passes, MaxRssMB(),
              per_pass, static_cast<double>(n) / per_pass);
  std::fflush(stdout);
  return 0;
}

template <typename F>
int InChild(F f) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) _exit(f());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace
}  // namespace shoal

int main(int argc, char** argv) {
  const size_t n = shoal::EnvSize("SHOAL_BENCH_FLOATS", 10'000'000);
  const double max_seconds = static_cast<double>(shoal::EnvSize("SHOAL_BENCH_MAX_SECONDS", 900));
  std::vector<size_t> ks;
  for (int i = 1; i < argc; ++i) ks.push_back(static_cast<size_t>(std::strtoull(argv[i], nullptr, 10)));
  if (ks.empty()) ks = {10, 100, 1000};
  std::printf("model floats=%zu (%.1f MB fp32)\n", n, static_cast<double>(n) * 4.0 / 1e6);
  int rc = shoal::InChild([&] { return shoal::RunPlain(n, 20); });
  for (size_t k : ks) rc |= shoal::InChild([&] { return shoal::RunAccumulator(n, k, max_seconds); });
  return rc;
}
