// shoal-sim: a federation of N virtual clients in one process (sdk/src/runtime/sim): the real
// aggregator and client code over the in-process network. Takes every task and round option
// of shoal-aggregator; the flag table is in cli/sim_flags.h.
#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "cli/cli.h"
#include "cli/options.h"
#include "cli/sim_flags.h"

namespace po = boost::program_options;

namespace {

constexpr const char* kProgram = "shoal-sim";

}  // namespace

int main(int argc, char** argv) {
  shoal::sim::SimOptions o;
  shoal::cli::SimCliDefaults(o);
  shoal::cli::SimFlags flags;
  std::string config_file, log_level;

  po::options_description general("General");
  general.add_options()
      ("help,h", "show this help and exit")
      ("version", "print the version and exit")
      ("config", po::value(&config_file), "read options from FILE (key = value lines, same names as the flags)")
      ("log-level", po::value(&log_level)->default_value("warn"), "trace, debug, info, warn, error or off");

  po::options_description all("Usage: shoal-sim --clients N [options]\n\n"
                              "Runs the aggregator and N virtual clients in this process over an in-process network\n"
                              "(the real protocol and wire format), and writes the aggregator's metrics.\n"
                              "Example:\n  shoal-sim --clients 10000 --fraction 0.1 --rounds 20 --dataset digits \\\n"
                              "    --lr 0.1 --momentum 0.9 --metrics-out sim.jsonl\n");
  all.add(general).add(shoal::cli::SimulationOptionsTable(o, flags));

  po::variables_map vm;
  if (auto exit_code = shoal::cli::ParseOptions(argc, argv, all, vm, kProgram)) return *exit_code;
  if (auto st = shoal::cli::InitLogging(log_level, "sim"); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  if (shoal::aggregator::PrintCodecHelpIfAsked(o.server)) return 0;
  if (auto st = shoal::cli::ApplySimFlags(vm, flags, o); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);

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
