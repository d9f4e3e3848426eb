// shoal-client: joins an aggregator and trains Shoal's built-in model on a dataset partition.
#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "cli/cli.h"
#include "cli/options.h"
#include "cli/data_parallel_flags.h"
#include "shoal/data.h"
#include "shoal/client.h"
#include "shoal/config.h"

namespace po = boost::program_options;

namespace {

constexpr const char* kProgram = "shoal-client";

std::string Human(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(1ull << 30));
  else if (bytes >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / double(1ull << 20));
  else if (bytes >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

// A progress bar on a terminal, plain log lines otherwise.
class Reporter {
 public:
  explicit Reporter(bool tty) : tty_(tty) {}
  void operator()(const shoal::ClientEvent& e) {
    using K = shoal::ClientEvent::Kind;
    switch (e.kind) {
      case K::kConnected: Line(e.message); break;
      case K::kRoundStarted:
        if (!tty_) spdlog::info("round {}: training", e.round);
        Bar(e.round, 0.0f);
        break;
      case K::kProgress: Bar(e.round, e.progress); break;
      case K::kRoundDone: {
        char buf[160];
        std::snprintf(buf, sizeof buf, "round %llu done: train_loss %.4f, %.2f s, sent %s, received %s",
                      static_cast<unsigned long long>(e.round), e.train_loss, e.seconds, Human(e.bytes_sent).c_str(),
                      Human(e.bytes_received).c_str());
        Line(buf);
        break;
      }
      case K::kReconnecting: Line("reconnecting: " + e.message); break;
      case K::kFinished: Line("finished: " + e.message); break;
    }
  }

 private:
  void Bar(uint64_t round, float p) {
    if (!tty_) return;
    const int width = 30, filled = static_cast<int>(std::lround(p * width));
    std::fprintf(stderr, "\rround %4llu [%.*s%*s] %3d%%", static_cast<unsigned long long>(round), filled,
                 "##############################", width - filled, "", static_cast<int>(std::lround(p * 100)));
    std::fflush(stderr);
    bar_shown_ = true;
  }
  void Line(const std::string& s) {
    if (bar_shown_) {
      std::fprintf(stderr, "\r\033[K");
      bar_shown_ = false;
    }
    spdlog::info("{}", s);
  }
  bool tty_;
  bool bar_shown_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  shoal::ClientOptions co;
  shoal::BuiltinTrainerOptions to;
  std::string config_file, log_level, partition = "0/1", max_frame;
  std::string log_format = "text";
  uint64_t seed = 0;
  shoal::cli::DataParallelFlags dp;
  double connect_timeout_s = 30, reconnect_timeout_s = 120;
  bool no_progress = false;

  po::options_description opts(
      "Usage: shoal-client [options]\n\n"
      "Joins a shoal-aggregator and trains Shoal's built-in model on this machine's part of a\n"
      "dataset. The aggregator sends the task (model, optimizer, local epochs); the client only\n"
      "needs the connection and its data.\n"
      "Example:\n  shoal-client --connect tcp://127.0.0.1:7070 --dataset digits --partition 2/4\n\nOptions");
  opts.add_options()
      ("help,h", "show this help and exit")
      ("version", "print the version and exit")
      ("config", po::value(&config_file), "read options from FILE (key = value lines)")
      ("connect", po::value(&co.connect)->default_value(co.connect), "aggregator endpoint")
      ("secret-key", po::value(&co.secret_key_file), "this client's key file (PREFIX.key from shoal-keygen): CurveZMQ encryption and authentication")
      ("server-key", po::value(&co.server_key), "the aggregator's public key: 40 Z85 characters or its .pub file (pins the aggregator)")
      ("insecure", po::bool_switch(&co.insecure), "connect to a non-loopback aggregator without encryption or authentication")
      ("name", po::value(&co.name), "stable client name (default: HOST-partI-of-N)")
      ("dataset", po::value(&to.dataset)->default_value(to.dataset), "digits, csv:PATH, idx:IMAGES,LABELS (features); kjv, text:PATH (byte tokens, for gpt)")
      ("data-dir", po::value(&to.data_dir), "dataset cache (default $SHOAL_DATA_DIR or ~/.cache/shoal)")
      ("partition", po::value(&partition)->default_value(partition), "this client's part i/n, 0-based (0/4 ... 3/4)")
      ("partition-scheme", po::value(&to.partition_scheme)->default_value(to.partition_scheme), "iid or dirichlet:ALPHA")
      ("seed", po::value(&seed), "must equal the aggregator's --seed if given (the split derives from it)")
      ("device", po::value(&to.device)->default_value(to.device), "auto, cpu or cuda[:N]")
      ("precision", po::value(&to.precision)->default_value(to.precision), "GEMM precision: fp32, tf32, bf16 or fp16 (fp32 master weights; fp16 with dynamic loss scaling)")
      ("connect-timeout", po::value(&connect_timeout_s)->default_value(connect_timeout_s), "seconds to wait for the aggregator to answer")
      ("reconnect-timeout", po::value(&reconnect_timeout_s)->default_value(reconnect_timeout_s), "seconds to keep retrying after losing it")
      ("max-frame", po::value(&max_frame), "largest frame accepted (bytes, or K/M/G); default 64 MiB + 256 KiB, room for an aggregator's --chunk-size up to 64M")
      ("no-progress", po::bool_switch(&no_progress), "plain log lines even on a terminal")
      ("log-level", po::value(&log_level)->default_value("info"), "trace, debug, info, warn, error or off")
      ("log-format", po::value(&log_format)->default_value(log_format), "text, or json (one object per line)");

  shoal::ClientPrivacyPolicy& pp = co.privacy;
  po::options_description privacy(
      "Privacy policy: what this client requires of the aggregator's task, whatever the aggregator\n"
      "says; a task below it is refused before any training (docs/SECURITY.md)");
  privacy.add_options()
      ("require-secagg", po::bool_switch(&pp.require_secagg), "refuse a task without secure aggregation (plain updates)")
      ("min-noise", po::value(&pp.min_noise_multiplier)->default_value(pp.min_noise_multiplier), "refuse a distributed DP noise multiplier z below this (> 0 also refuses a task without DP)")
      ("max-clip", po::value(&pp.max_clip)->default_value(pp.max_clip), "refuse a DP clip C above this (> 0 also refuses a task without DP); 0 = any")
      ("min-neighbours", po::value(&pp.min_neighbours)->default_value(pp.min_neighbours), "secure aggregation: refuse a round that gives this client fewer neighbours k")
      ("min-threshold", po::value(&pp.min_threshold)->default_value(pp.min_threshold), "secure aggregation: refuse a round whose threshold t is lower")
      ("min-roster", po::value(&pp.min_roster)->default_value(pp.min_roster), "secure aggregation: refuse a round with fewer clients in its roster")
      ("secagg-colluding", po::value(&pp.colluding_fraction)->default_value(pp.colluding_fraction), "secure aggregation: the share of the roster assumed to collude with the aggregator (raises the consistency quorum)")
      ("trusted-roster", po::value(&pp.trusted_roster), "secure aggregation: the .pub files (FILE or DIR) of the clients this client trusts; every round's roster must consist of them (needs --secret-key)");
  opts.add(privacy);
  opts.add(shoal::cli::DataParallelOptions(to, dp));
  po::variables_map vm;
  if (auto exit_code = shoal::cli::ParseOptions(argc, argv, opts, vm, kProgram)) return *exit_code;
  if (auto st = shoal::cli::InitLogging(log_level, "client", log_format); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  auto part = shoal::data::ParsePartition(partition);
  if (!part.ok()) return shoal::cli::Fail(kProgram, "--partition: " + part.status().message(), 2);
  to.partition_index = part->index;
  to.partition_count = part->count;
  if (vm.count("seed")) to.seed = seed;
  if (auto st = shoal::cli::ApplyDataParallelFlags(vm, dp, to); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  if (!max_frame.empty()) {
    auto frame = shoal::cli::ParseByteSize(max_frame);
    if (!frame.ok()) return shoal::cli::Fail(kProgram, "--max-frame: " + frame.status().message(), 2);
    co.max_frame_bytes = *frame;
  }
  if (!(connect_timeout_s > 0) || !(reconnect_timeout_s > 0))
    return shoal::cli::Fail(kProgram, "timeouts must be positive", 2);
  co.connect_timeout_ms = static_cast<uint32_t>(std::llround(connect_timeout_s * 1000));
  co.reconnect_timeout_ms = static_cast<uint32_t>(std::llround(reconnect_timeout_s * 1000));
  if (co.name.empty()) {
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    co.name = std::string(host) + "-part" + std::to_string(part->index) + "-of-" + std::to_string(part->count);
  }

  // The flags first: a bad one is named before any data is loaded or device probed.
  if (auto st = shoal::ValidateClientOptions(co); !st.ok())
    return shoal::cli::Fail(kProgram, st);
  auto trainer = shoal::MakeBuiltinTrainer(to);
  if (!trainer.ok()) return shoal::cli::Fail(kProgram, trainer.status());
  Reporter reporter(!no_progress && isatty(STDERR_FILENO));
  co.on_event = [&reporter](const shoal::ClientEvent& e) { reporter(e); };

  shoal::Client client(co, std::move(*trainer));
  auto& stop = shoal::cli::InstallStopSignals();
  std::thread watcher([&] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    client.Cancel();
  });
  shoal::Status st = client.Run();
  stop.store(true);  // release the watcher thread
  watcher.join();
  if (st.ok() || st.code() == shoal::StatusCode::kCancelled) {
    auto s = client.stats();
    spdlog::info("trained {} rounds; sent {}, received {}", s.rounds_trained, Human(s.bytes_sent), Human(s.bytes_received));
    return 0;
  }
  return shoal::cli::Fail(kProgram, st);
}
