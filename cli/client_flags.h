// shoal-client's command-line options: the connection, the data, the privacy policy and the
// data-parallel flags, into ClientOptions and BuiltinTrainerOptions; and its progress report
// (a bar on a terminal, log lines otherwise).
#pragma once

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "cli/cli.h"
#include "cli/data_parallel_flags.h"
#include "shoal/client.h"
#include "shoal/data.h"
#include "shoal/trainer.h"

namespace shoal::cli {

// What the flags hold before they become the options (text, seconds).
struct ClientFlags {
  std::string partition = "0/1";
  std::string max_frame;
  uint64_t seed = 0;
  DataParallelFlags data_parallel;
  double connect_timeout_s = 30, reconnect_timeout_s = 120;
  bool no_progress = false;
};

inline boost::program_options::options_description ClientOptionsTable(ClientOptions& co, BuiltinTrainerOptions& to,
                                                                      ClientFlags& f) {
  namespace po = boost::program_options;
  po::options_description d("Client");
  d.add_options()
      ("connect", po::value(&co.connect)->default_value(co.connect), "aggregator endpoint")
      ("secret-key", po::value(&co.secret_key_file), "this client's key file (PREFIX.key from shoal-keygen): CurveZMQ encryption and authentication")
      ("server-key", po::value(&co.server_key), "the aggregator's public key: 40 Z85 characters or its .pub file (pins the aggregator)")
      ("insecure", po::bool_switch(&co.insecure), "connect to a non-loopback aggregator without encryption or authentication")
      ("name", po::value(&co.name), "stable client name (default: HOST-partI-of-N)")
      ("dataset", po::value(&to.dataset)->default_value(to.dataset), "digits, csv:PATH, idx:IMAGES,LABELS (features); kjv, text:PATH (byte tokens, for gpt)")
      ("data-dir", po::value(&to.data_dir), "dataset cache (default $SHOAL_DATA_DIR or ~/.cache/shoal)")
      ("partition", po::value(&f.partition)->default_value(f.partition), "this client's part i/n, 0-based (0/4 ... 3/4)")
      ("partition-scheme", po::value(&to.partition_scheme)->default_value(to.partition_scheme), "iid or dirichlet:ALPHA")
      ("seed", po::value(&f.seed), "must equal the aggregator's --seed if given (the split derives from it)")
      ("device", po::value(&to.device)->default_value(to.device), "auto, cpu or cuda[:N]")
      ("precision", po::value(&to.precision)->default_value(to.precision), "GEMM precision: fp32, tf32, bf16 or fp16 (fp32 master weights; fp16 with dynamic loss scaling)")
      ("connect-timeout", po::value(&f.connect_timeout_s)->default_value(f.connect_timeout_s), "seconds to wait for the aggregator to answer")
      ("reconnect-timeout", po::value(&f.reconnect_timeout_s)->default_value(f.reconnect_timeout_s), "seconds to keep retrying after losing it")
      ("max-frame", po::value(&f.max_frame), "largest frame accepted (bytes, or K/M/G); default 64 MiB + 256 KiB, room for an aggregator's --chunk-size up to 64M")
      ("no-progress", po::bool_switch(&f.no_progress), "plain log lines even on a terminal");

  ClientPrivacyPolicy& pp = co.privacy;
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
  d.add(privacy);
  d.add(DataParallelOptions(to, f.data_parallel));
  return d;
}

// Moves the parsed flags into the options; InvalidArgument names the flag. The client's name
// defaults to HOST-partI-of-N.
inline Status ApplyClientFlags(const boost::program_options::variables_map& vm, const ClientFlags& f, ClientOptions& co,
                               BuiltinTrainerOptions& to) {
  SHOAL_RETURN_IF_ERROR(ApplyPartitionFlag(f.partition, to, &co.name));
  if (vm.count("seed")) to.seed = f.seed;
  SHOAL_RETURN_IF_ERROR(ApplyDataParallelFlags(vm, f.data_parallel, to));
  if (!f.max_frame.empty()) {
    auto frame = ParseByteSize(f.max_frame);
    if (!frame.ok()) return Status::InvalidArgument("--max-frame: " + frame.status().message());
    co.max_frame_bytes = *frame;
  }
  if (!(f.connect_timeout_s > 0) || !(f.reconnect_timeout_s > 0)) return Status::InvalidArgument("timeouts must be positive");
  co.connect_timeout_ms = Millis(f.connect_timeout_s);
  co.reconnect_timeout_ms = Millis(f.reconnect_timeout_s);
  return Status::Ok();
}

// "1.50 MiB".
inline std::string HumanBytes(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(1ull << 30));
  else if (bytes >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / double(1ull << 20));
  else if (bytes >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

// The client's events as a progress bar on a terminal, plain log lines otherwise.
class ProgressReporter {
 public:
  explicit ProgressReporter(bool tty) : tty_(tty) {}
  void operator()(const ClientEvent& e) {
    using K = ClientEvent::Kind;
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
                      static_cast<unsigned long long>(e.round), e.train_loss, e.seconds, HumanBytes(e.bytes_sent).c_str(),
                      HumanBytes(e.bytes_received).c_str());
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

}  // namespace shoal::cli
