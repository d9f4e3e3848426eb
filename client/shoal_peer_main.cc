// shoal-peer: serverless training with other peers, no aggregator (shoal/peer.h). The flag
// table is in cli/peer_flags.h.
#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "cli/peer_flags.h"
#include "shoal/config.h"
#include "shoal/peer.h"
#include "peer_metrics.h"

namespace po = boost::program_options;

namespace {
constexpr const char* kProgram = "shoal-peer";
}  // namespace

int main(int argc, char** argv) {
  shoal::PeerOptions o;
  shoal::cli::PeerCliDefaults(o);
  shoal::cli::PeerFlags flags;
  std::string config_file, log_level, metrics_listen, log_format = "text";

  po::options_description opts(
      "Usage: shoal-peer [options]\n\n"
      "Trains one model together with other shoal-peer processes, with no aggregator. The first\n"
      "peer (no --peers) founds the swarm and its task; the others join through any member.\n"
      "Every peer may be given the same --peers list, its own address included: the first\n"
      "listed founds the swarm when no other answers.\n"
      "Example (three terminals):\n"
      "  shoal-peer --listen tcp://127.0.0.1:7101 --name p0 --partition 0/3 --min-peers 3 --steps 300\n"
      "  shoal-peer --listen tcp://127.0.0.1:7102 --name p1 --partition 1/3 --peers tcp://127.0.0.1:7101\n"
      "  shoal-peer --listen tcp://127.0.0.1:7103 --name p2 --partition 2/3 --peers tcp://127.0.0.1:7101\n\n"
      "Options");
  opts.add_options()
      ("help,h", "show this help and exit")
      ("version", "print the version and exit")
      ("config", po::value(&config_file), "read options from FILE (key = value lines)")
      ("log-level", po::value(&log_level)->default_value("info"), "trace, debug, info, warn, error or off")
      ("log-format", po::value(&log_format)->default_value(log_format), "text, or json (one object per line)")
      ("metrics-listen", po::value(&metrics_listen),
       "serve Prometheus metrics at http://HOST:PORT/metrics (HOST:PORT, or PORT alone for 127.0.0.1)");
  opts.add(shoal::cli::PeerOptionsTable(o, flags));
  po::variables_map vm;
  if (auto code = shoal::cli::ParseOptions(argc, argv, opts, vm, kProgram)) return *code;
  if (auto st = shoal::cli::InitLogging(log_level, "peer", log_format); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  if (auto st = shoal::cli::ApplyPeerFlags(vm, flags, o); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  std::unique_ptr<shoal::telemetry::MetricsEndpoint> endpoint;
  if (!metrics_listen.empty()) {
    auto metrics = std::make_shared<shoal::telemetry::PeerMetrics>();
    auto started = shoal::telemetry::MetricsEndpoint::Start(metrics_listen, kProgram, metrics);
    if (!started.ok()) return shoal::cli::Fail(kProgram, started.status());
    endpoint = std::move(*started);
    o.on_step = [metrics](const shoal::PeerStep& s) { metrics->OnStep(s); };
    spdlog::info("Prometheus metrics at http://{}/metrics", endpoint->address());
  }
  auto& stop = shoal::cli::InstallStopSignals();
  shoal::Status st = shoal::RunPeer(o, stop);
  if (st.ok() || st.code() == shoal::StatusCode::kCancelled) return 0;
  return shoal::cli::Fail(kProgram, st);
}
