// shoal-sim: a federation of N virtual clients in one process (sdk/src/runtime/sim): the real
// aggregator and client code over the in-process network. Takes every task and round option
// of shoal-aggregator.
#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "cli/cli.h"
#include "cli/options.h"
#include "cli/service_flags.h"
#include "runtime/sim/simulator.h"

namespace po = boost::program_options;

namespace {

constexpr const char* kProgram = "shoal-sim";

}  // namespace

int main(int argc, char** argv) {
  shoal::sim::SimOptions o;
  shoal::aggregator::ServiceFlags flags;
  std::string config_file, log_level, churn_at = "start";
  o.server.rounds = 20;
  o.server.fraction = 0.1;

  po::options_description general("General");
  general.add_options()
      ("help,h", "show this help and exit")
      ("version", "print the version and exit")
      ("config", po::value(&config_file), "read options from FILE (key = value lines, same names as the flags)")
      ("log-level", po::value(&log_level)->default_value("warn"), "trace, debug, info, warn, error or off");

  po::options_description simulation("Simulation");
  simulation.add_options()
      ("clients", po::value(&o.clients)->default_value(o.clients), "virtual clients")
      ("partition-scheme", po::value(&o.partition_scheme)->default_value(o.partition_scheme), "iid or dirichlet:ALPHA")
      ("min-part", po::value(&o.min_part)->default_value(o.min_part), "fewest examples in a part; more clients than parts share parts")
      ("threads", po::value(&o.threads)->default_value(o.threads), "threads driving the clients (0 = one per core)")
      ("edges", po::value(&o.edges)->default_value(o.edges),
       "edge aggregators between the clients and the root (client i joins edge i mod N; each selects --fraction of its "
       "clients, the root every edge); 0 = the clients join the root")
      ("churn", po::value(&o.churn)->default_value(o.churn),
       "per round, share of the selected clients that die (no Bye, nothing more sent), [0, 1)")
      ("churn-at", po::value(&churn_at)->default_value(churn_at),
       "where in its round a churned client dies: start (its task arrived; nothing trained or shared), train (its "
       "training done, nothing of the update sent), keys (its key shares sent, not its masked update; --secagg), "
       "upload (its whole update sent), unmask (the survivor set arrived, nothing signed or revealed; --secagg), "
       "random (a uniform time over the previous round's duration from its task; in round 1 one of the points)")
      ("churn-restart", po::value(&o.churn_restart_ms)->default_value(o.churn_restart_ms), "milliseconds until a dead client reconnects")
      ("partition", po::value(&o.partition)->default_value(o.partition),
       "share of the clients a network partition cuts off from their aggregator (frames both ways lost, connections "
       "kept), [0, 1)")
      ("partition-round", po::value(&o.partition_round)->default_value(o.partition_round),
       "the partition starts when round N-1 closes (N = 1: at the start)")
      ("partition-ms", po::value(&o.partition_ms)->default_value(o.partition_ms), "how long the partition lasts")
      ("flapping", po::value(&o.flapping)->default_value(o.flapping),
       "share of the clients whose links go down for --flap-ms and up for --flap-ms, alternately, all run long")
      ("flap-ms", po::value(&o.flap_ms)->default_value(o.flap_ms), "a flapping link's down (and up) time")
      ("latency-ms", po::value(&o.latency_ms)->default_value(o.latency_ms), "median one-way link latency")
      ("latency-spread", po::value(&o.latency_spread)->default_value(o.latency_spread), "standard deviation of log(latency) across clients")
      ("up-mbps", po::value(&o.up_mbps)->default_value(o.up_mbps), "median upload rate, Mbit/s (0 = unlimited)")
      ("down-mbps", po::value(&o.down_mbps)->default_value(o.down_mbps), "median download rate, Mbit/s (0 = unlimited)")
      ("bandwidth-spread", po::value(&o.bandwidth_spread)->default_value(o.bandwidth_spread), "standard deviation of log(rate) across clients")
      ("stragglers", po::value(&o.stragglers)->default_value(o.stragglers), "share of clients whose updates arrive late")
      ("straggler-ms", po::value(&o.straggler_ms)->default_value(o.straggler_ms), "how late a straggler's updates arrive")
      ("attack", po::value(&o.attack.kind)->default_value(o.attack.kind),
       "Byzantine clients: none, sign-flip, scale, noise, label-flip, alie or ipm")
      ("attackers", po::value(&o.attack.attackers)->default_value(o.attack.attackers), "share of the clients that attack, [0, 1)")
      ("attack-strength", po::value(&o.attack.strength)->default_value(o.attack.strength),
       "scale's factor (100), noise's stddev (10), ipm's epsilon (0.1), alie's z (from n and m); 0 = that default");

  po::options_description all("Usage: shoal-sim --clients N [options]\n\n"
                              "Runs the aggregator and N virtual clients in this process over an in-process network\n"
                              "(the real protocol and wire format), and writes the aggregator's metrics.\n"
                              "Example:\n  shoal-sim --clients 10000 --fraction 0.1 --rounds 20 --dataset digits \\\n"
                              "    --lr 0.1 --momentum 0.9 --metrics-out sim.jsonl\n");
  all.add(general).add(simulation).add(shoal::aggregator::RoundOptions(o.server, flags)).add(shoal::aggregator::TaskOptions(o.server, flags))
      .add(shoal::aggregator::PrivacyOptions(o.server, flags));

  po::variables_map vm;
  if (auto exit_code = shoal::cli::ParseOptions(argc, argv, all, vm, kProgram)) return *exit_code;
  if (auto st = shoal::cli::InitLogging(log_level, "sim"); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  if (shoal::aggregator::PrintCodecHelpIfAsked(o.server)) return 0;
  if (auto st = shoal::aggregator::ApplyServiceFlags(flags, o.server); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  // Rounds start once every virtual client has registered, unless told otherwise.
  if (vm["min-clients"].defaulted()) o.server.min_clients = o.clients;
  auto at = shoal::sim::ParseChurnAt(churn_at);
  if (!at.ok()) return shoal::cli::Fail(kProgram, at.status().message(), 2);
  o.churn_at = *at;

  const auto& stop = shoal::cli::InstallStopSignals();
  auto sim = shoal::sim::Simulator::Create(o);
  if (!sim.ok()) return shoal::cli::Fail(kProgram, sim.status());
  auto report = (*sim)->Run(stop);
  if (!report.ok()) return shoal::cli::Fail(kProgram, report.status().message());
  const auto& r = *report;
  std::printf("shoal-sim: %u clients (%u data parts), %llu rounds in %.2f s (%.3f s per round; setup and registration "
              "%.2f s), final accuracy %.4f, %u attackers, %llu churn deaths, %llu frames lost, at most %zu model "
              "versions held, peak RSS %.1f MiB; root per round (after the first): %.4f CPU s, %.0f bytes in, %u edges\n",
              o.clients, r.parts, static_cast<unsigned long long>(r.rounds), r.seconds, r.round_seconds, r.setup_seconds,
              r.final_accuracy, r.attackers, static_cast<unsigned long long>(r.deaths), static_cast<unsigned long long>(r.frames_lost),
              r.live_replicas_peak, static_cast<double>(r.peak_rss_bytes) / (1 << 20), r.root_cpu_seconds, r.root_bytes_in,
              o.edges);
  if (r.deaths > 0) {
    std::string where;
    for (int k = 0; k < static_cast<int>(shoal::sim::DeathPoint::kCount); ++k)
      if (r.deaths_at[k] > 0)
        where += (where.empty() ? "" : ", ") + std::to_string(r.deaths_at[k]) + " " +
                 shoal::sim::DeathPointName(static_cast<shoal::sim::DeathPoint>(k));
    std::printf("shoal-sim: churn deaths by where they were: %s\n", where.c_str());
  }
  return 0;
}
