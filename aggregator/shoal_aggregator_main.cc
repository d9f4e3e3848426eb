// shoal-aggregator: the federated training service (DESIGN.md §6).
#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "shoal/server.h"
#include "cli/service_flags.h"
#include "aggregator_endpoints.h"

namespace po = boost::program_options;
using shoal::ServerOptions;

namespace {

constexpr const char* kProgram = "shoal-aggregator";

}  // namespace

int main(int argc, char** argv) {
  ServerOptions o;
  shoal::aggregator::ServiceFlags flags;
  std::string config_file, log_level, metrics_listen, status_listen;
  std::string log_format = "text";

  po::options_description general("General");
  general.add_options()
      ("help,h", "show this help and exit")
      ("version", "print the version and exit")
      ("config", po::value(&config_file), "read options from FILE (key = value lines, same names as the flags)")
      ("log-level", po::value(&log_level)->default_value("info"), "trace, debug, info, warn, error or off")
      ("log-format", po::value(&log_format)->default_value(log_format), "text, or json (one object per line)")
      ("metrics-listen", po::value(&metrics_listen),
       "serve Prometheus metrics at http://HOST:PORT/metrics (HOST:PORT, or PORT alone for 127.0.0.1)")
      ("status-listen", po::value(&status_listen),
       "serve a live status page at http://HOST:PORT/ (HOST:PORT, or PORT alone for 127.0.0.1)");

  po::options_description transport("Transport");
  transport.add_options()
      ("listen", po::value(&o.listen)->default_value(o.listen), "ZeroMQ endpoint to bind, e.g. tcp://*:7070")
      ("secret-key", po::value(&o.secret_key), "this aggregator's key file (PREFIX.key from shoal-keygen): CurveZMQ encryption and authentication")
      ("allow-keys", po::value(&o.allow_keys), "client public keys to admit: a file (one Z85 key per line) or a directory of .pub files; re-read on SIGHUP")
      ("insecure", po::bool_switch(&o.insecure), "serve a non-loopback --listen without encryption or authentication (experiments only)")
      ("recv-hwm", po::value(&o.recv_hwm)->default_value(o.recv_hwm), "frames queued per client connection before ZeroMQ stops reading it (bounds memory)");

  po::options_description all("Usage: shoal-aggregator [options]\n\n"
                              "Runs federated training rounds over ZeroMQ: clients join with Hello, train the\n"
                              "model on their own data, and send updates that are averaged into the global model.\n"
                              "Example:\n  shoal-aggregator --listen tcp://*:7070 --rounds 30 --min-clients 4 \\\n"
                              "    --model mlp --dataset digits --metrics-out run.jsonl --checkpoint-dir ckpt\n"
                              "An edge aggregator of that one, for its own clients:\n"
                              "  shoal-aggregator --listen tcp://*:7071 --upstream tcp://root:7070 --upstream-name edge-eu\n");
  all.add(general).add(transport).add(shoal::aggregator::RoundOptions(o, flags)).add(shoal::aggregator::TaskOptions(o, flags))
      .add(shoal::aggregator::PrivacyOptions(o, flags)).add(shoal::aggregator::TierOptions(o, flags));

  po::variables_map vm;
  if (auto exit_code = shoal::cli::ParseOptions(argc, argv, all, vm, kProgram)) return *exit_code;
  if (auto st = shoal::cli::InitLogging(log_level, "aggregator", log_format); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  if (shoal::aggregator::PrintCodecHelpIfAsked(o)) return 0;
  if (auto st = shoal::aggregator::ApplyServiceFlags(flags, o); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);

  const auto& stop = shoal::cli::InstallStopSignals();
  auto& reload = shoal::cli::InstallReloadSignal();
  shoal::telemetry::AggregatorEndpoints endpoints;
  if (!metrics_listen.empty() || !status_listen.empty()) endpoints.Observe(o);
  auto server = shoal::Server::Create(o);
  if (!server.ok()) return shoal::cli::Fail(kProgram, server.status());
  if (auto st = endpoints.Start(metrics_listen, status_listen, kProgram); !st.ok()) return shoal::cli::Fail(kProgram, st);
  // The signal handlers set flags; the loop hands them to the server between slices.
  bool finished = false;
  shoal::Status st;
  while (!finished) {
    if (stop.load()) (*server)->Stop();
    if (reload.exchange(false)) (*server)->ReloadAllowList();
    st = (*server)->Poll(100, &finished);
  }
  if (!st.ok()) return shoal::cli::Fail(kProgram, st.message());
  return 0;
}
