// shoal-sim's command-line options: the simulated network, churn and attacks, then every round,
// task and privacy option of shoal-aggregator (cli/service_flags.h), into sim::SimOptions.
#pragma once

#include <boost/program_options.hpp>

#include <string>

#include "cli/service_flags.h"
#include "runtime/sim/simulator.h"

namespace shoal::cli {

// What the flags hold before they become the options.
struct SimFlags {
  std::string churn_at = "start";
  aggregator::ServiceFlags service;
};

// shoal-sim's defaults where they differ from the aggregator's: 20 rounds, a tenth of the
// clients a round.
inline void SimCliDefaults(sim::SimOptions& o) {
  o.server.rounds = 20;
  o.server.fraction = 0.1;
}

inline boost::program_options::options_description SimulationOptionsTable(sim::SimOptions& o, SimFlags& f) {
  namespace po = boost::program_options;
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
      ("churn-at", po::value(&f.churn_at)->default_value(f.churn_at),
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
  po::options_description all;
  all.add(simulation)
      .add(aggregator::RoundOptions(o.server, f.service))
      .add(aggregator::TaskOptions(o.server, f.service))
      .add(aggregator::PrivacyOptions(o.server, f.service));
  return all;
}

// Moves the parsed flags into the options; InvalidArgument names the flag. Rounds start once
// every virtual client has registered unless --min-clients says otherwise.
inline Status ApplySimFlags(const boost::program_options::variables_map& vm, const SimFlags& f, sim::SimOptions& o) {
  SHOAL_RETURN_IF_ERROR(aggregator::ApplyServiceFlags(f.service, o.server));
  if (vm["min-clients"].defaulted()) o.server.min_clients = o.clients;
  auto at = sim::ParseChurnAt(f.churn_at);
  if (!at.ok()) return Status::InvalidArgument(at.status().message());
  o.churn_at = *at;
  return Status::Ok();
}

}  // namespace shoal::cli
