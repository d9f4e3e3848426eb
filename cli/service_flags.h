// The aggregator's command-line options, declared once for every CLI that runs the service:
// shoal-aggregator, and shoal-sim (which accepts every task and strategy option of it).
#pragma once

#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <string>

#include "codec/registry.h"
#include "cli/cli.h"
#include "shoal/server.h"

namespace shoal::aggregator {

// What the flags hold before they become ServerOptions (seconds, byte sizes as text).
struct ServiceFlags {
  std::string chunk_size = "16M";
  std::string optimizer = "sgd";
  double round_timeout_s = 60, heartbeat_s = 1, heartbeat_timeout_s = 10, deadline_min_s = 0.5;
  std::string dp_mode;  // "" = distributed with --secagg, else central
  double secagg_stage_timeout_s = 10;
  double upstream_timeout_s = 60;
};

// Round and liveness rules, limits, outputs: everything of the service but its transport.
inline boost::program_options::options_description RoundOptions(ServerOptions& o, ServiceFlags& f) {
  namespace po = boost::program_options;
  po::options_description d("Rounds");
  d.add_options()
      ("rounds", po::value(&o.rounds)->default_value(o.rounds), "stop after N completed rounds and send clients Bye (0 = serve until stopped)")
      ("min-clients", po::value(&o.min_clients)->default_value(o.min_clients), "registered clients needed before a round starts")
      ("fraction", po::value(&o.fraction)->default_value(o.fraction), "share of registered clients selected per round, in (0, 1]")
      ("min-results", po::value(&o.min_results)->default_value(o.min_results), "updates needed to change the model in a round")
      ("round-timeout", po::value(&f.round_timeout_s)->default_value(f.round_timeout_s), "seconds a round waits for updates (at most, with --deadline-quantile)")
      ("deadline-quantile", po::value(&o.deadline.quantile)->default_value(o.deadline.quantile),
       "adaptive deadline: close a round at --deadline-margin times this quantile of recent update times (0 = fixed --round-timeout)")
      ("deadline-margin", po::value(&o.deadline.margin)->default_value(o.deadline.margin), "adaptive deadline: factor on the quantile")
      ("deadline-window", po::value(&o.deadline.window)->default_value(o.deadline.window), "adaptive deadline: rounds of update times kept")
      ("deadline-min", po::value(&f.deadline_min_s)->default_value(f.deadline_min_s), "adaptive deadline: fewest seconds a round waits")
      ("heartbeat-interval", po::value(&f.heartbeat_s)->default_value(f.heartbeat_s), "seconds between client heartbeats")
      ("heartbeat-timeout", po::value(&f.heartbeat_timeout_s)->default_value(f.heartbeat_timeout_s), "seconds of silence before a client is dropped")
      ("chunk-size", po::value(&f.chunk_size)->default_value(f.chunk_size), "payload chunk size on the wire (bytes, or with K/M/G)")
      ("max-clients", po::value(&o.max_clients)->default_value(o.max_clients), "registration cap")
      ("max-update-norm", po::value(&o.max_update_norm)->default_value(o.max_update_norm), "reject client updates with a larger L2 norm (0 = no bound)")
      ("metrics-out", po::value(&o.metrics_out), "append one JSON object per round to FILE")
      ("checkpoint-dir", po::value(&o.checkpoint_dir), "checkpoint every completed round into DIR")
      ("resume", po::bool_switch(&o.resume), "continue from --checkpoint-dir's last completed round")
      ("device", po::value(&o.device)->default_value(o.device), "evaluation backend: auto, cpu, cuda[:N]")
      ("codec", po::value(&o.codec)->default_value(o.codec), "upload codec, e.g. int8, ef|topk:ratio=0.01|int8, demo:chunk=64,topk=8,bits=1 (none = dense fp32; help = list every stage)")
      ("codec-down", po::value(&o.codec_down), "download codec for the global delta (default: same as --codec)")
      ("codec-slow", po::value(&o.codec_slow), "upload codec for clients whose measured upload rate is below --slow-below-mbps (e.g. int8)")
      ("slow-below-mbps", po::value(&o.slow_below_mbps)->default_value(o.slow_below_mbps), "with --codec-slow: the upload rate, Mbit/s, below which a client switches to it");
  return d;
}

// The task sent to every client at Welcome, and the strategy.
inline boost::program_options::options_description TaskOptions(ServerOptions& o, ServiceFlags& f) {
  namespace po = boost::program_options;
  po::options_description d("Task (sent to every client at Welcome)");
  d.add_options()
      ("model", po::value(&o.model)->default_value(o.model), "model spec: mlp, mlp:H1,H2,..., mlp:H1,act=gelu, linear; gpt[:layers=L,dim=D,heads=H,ctx=T[,ckpt=1]] on text")
      ("dataset", po::value(&o.dataset)->default_value(o.dataset), "digits, csv:PATH, idx:IMAGES,LABELS (features); kjv, text:PATH (byte tokens, for gpt)")
      ("data-dir", po::value(&o.data_dir), "dataset cache (default $SHOAL_DATA_DIR or ~/.cache/shoal)")
      ("seed", po::value(&o.seed)->default_value(o.seed), "seed for model init, data split and client sampling")
      ("test-fraction", po::value(&o.test_fraction)->default_value(o.test_fraction), "held-out share of the dataset")
      ("standardize", po::value(&o.standardize)->default_value(o.standardize),
       "scale each feature by the training split's mean and standard deviation, sent to clients in the task: auto (on for csv:), on, off")
      ("strategy", po::value(&o.strategy.name)->default_value(o.strategy.name),
       "fedavg, fedprox, demo (sign of the mean, for --client-optimizer demo); server optimizers fedavgm, fedadam, "
       "fedyogi, fedadagrad; robust rules median, trimmed_mean, krum, multi_krum, centered_clip; asynchronous fedbuff")
      ("prox-mu", po::value(&o.strategy.prox_mu)->default_value(o.strategy.prox_mu), "FedProx proximal coefficient")
      ("server-lr", po::value(&o.strategy.server_learning_rate)->default_value(o.strategy.server_learning_rate),
       "scale of the averaged update, or the server optimizer's step; 0: 1, or 0.01 for fedadam/fedyogi, 0.1 for fedadagrad")
      ("server-momentum", po::value(&o.strategy.server_momentum)->default_value(o.strategy.server_momentum), "fedavgm: momentum")
      ("server-beta1", po::value(&o.strategy.server_beta1)->default_value(o.strategy.server_beta1), "fedadam/fedyogi/fedadagrad: first-moment decay")
      ("server-beta2", po::value(&o.strategy.server_beta2)->default_value(o.strategy.server_beta2), "fedadam/fedyogi: second-moment decay")
      ("server-tau", po::value(&o.strategy.server_tau)->default_value(o.strategy.server_tau), "fedadam/fedyogi/fedadagrad: adaptivity tau")
      ("byzantine", po::value(&o.strategy.byzantine_fraction)->default_value(o.strategy.byzantine_fraction),
       "robust rules: share of each round's reports assumed Byzantine (trimmed_mean trims it at each end; krum's f)")
      ("clip-radius", po::value(&o.strategy.clip_radius)->default_value(o.strategy.clip_radius), "centered_clip: radius tau; 0 = the median distance")
      ("clip-iterations", po::value(&o.strategy.clip_iterations)->default_value(o.strategy.clip_iterations), "centered_clip: iterations")
      ("buffer-size", po::value(&o.strategy.buffer_size)->default_value(o.strategy.buffer_size), "fedbuff: updates buffered per commit (a round is one commit)")
      ("max-staleness", po::value(&o.strategy.max_staleness)->default_value(o.strategy.max_staleness), "fedbuff: refuse, as late, an update trained from a model more commits old")
      ("lr", po::value(&o.strategy.learning_rate)->default_value(o.strategy.learning_rate), "client learning rate")
      ("local-epochs", po::value(&o.strategy.local_epochs)->default_value(o.strategy.local_epochs), "local passes over the data per round")
      ("local-steps", po::value(&o.strategy.local_steps)->default_value(o.strategy.local_steps), "if > 0: exactly this many local minibatch steps per round")
      ("batch-size", po::value(&o.batch_size)->default_value(o.batch_size), "client minibatch size")
      ("client-optimizer", po::value(&f.optimizer)->default_value(f.optimizer), "client optimizer: sgd, adamw or demo (DeMo; needs --strategy demo)")
      ("client-demo-decay", po::value(&o.optimizer.demo_decay)->default_value(o.optimizer.demo_decay), "demo: momentum decay")
      ("client-demo-chunk", po::value(&o.optimizer.demo_chunk)->default_value(o.optimizer.demo_chunk), "demo: DCT chunk side")
      ("client-demo-topk", po::value(&o.optimizer.demo_topk)->default_value(o.optimizer.demo_topk), "demo: DCT coefficients extracted per chunk")
      ("momentum", po::value(&o.optimizer.momentum)->default_value(o.optimizer.momentum), "sgd momentum")
      ("nesterov", po::bool_switch(&o.optimizer.nesterov), "sgd Nesterov momentum")
      ("weight-decay", po::value(&o.optimizer.weight_decay)->default_value(o.optimizer.weight_decay), "weight decay");
  return d;
}

// Hierarchical aggregation: this aggregator as an edge of a parent (runtime/server/edge.h).
inline boost::program_options::options_description TierOptions(ServerOptions& o, ServiceFlags& f) {
  namespace po = boost::program_options;
  po::options_description d("Tiers (an edge aggregator: serves the parent's task to its own clients and sends the\n"
                            "parent their exact partial sum each round; its own task flags do not apply)");
  d.add_options()
      ("upstream", po::value(&o.upstream), "the parent aggregator's endpoint, e.g. tcp://root:7070 (none: this is the root)")
      ("upstream-name", po::value(&o.upstream_name), "this edge's client name at the parent (default edge-<pid>; keep it across restarts)")
      ("upstream-key", po::value(&o.upstream_key), "this edge's key file (PREFIX.key) for CurveZMQ to the parent")
      ("upstream-server-key", po::value(&o.upstream_server_key), "the parent's public key (Z85, or its PREFIX.pub)")
      ("upstream-timeout", po::value(&f.upstream_timeout_s)->default_value(f.upstream_timeout_s), "seconds to wait at start for the parent's task");
  return d;
}

// Differential privacy around the strategy (aggregate/wrappers/dp.h).
inline boost::program_options::options_description PrivacyOptions(ServerOptions& o, ServiceFlags& f) {
  namespace po = boost::program_options;
  DpOptions& dp = o.dp;
  SecAggOptions& sa = o.secagg;
  po::options_description d("Privacy: secure aggregation (SecAgg+) and differential privacy (client-level DP-FedAvg;\n"
                            "with DP on, clients are Poisson-sampled at --fraction)");
  d.add_options()
      ("secagg", po::bool_switch(&sa.enabled), "secure aggregation: the aggregator learns only the sum of the clients' updates")
      ("secagg-range", po::value(&sa.range)->default_value(sa.range), "each masked value is clipped to [-R, R] (counted, reported as secagg_clip_rate)")
      ("secagg-threshold", po::value(&sa.threshold)->default_value(sa.threshold), "shares that reconstruct a client's secrets (0 = derived from the clients, dropout and corruption)")
      ("secagg-neighbours", po::value(&sa.neighbours)->default_value(sa.neighbours), "neighbours per client in the SecAgg+ graph (0 = derived; n-1 = SecAgg's full graph)")
      ("secagg-dropout", po::value(&sa.dropout)->default_value(sa.dropout), "share of a round's clients that may drop out and the sum still unmasks")
      ("secagg-corrupt", po::value(&sa.corrupt)->default_value(sa.corrupt), "share of clients that may collude with the aggregator")
      ("secagg-stage-timeout", po::value(&f.secagg_stage_timeout_s)->default_value(f.secagg_stage_timeout_s), "seconds each key stage and the unmask stage wait for clients")
      ("dp-mode", po::value(&f.dp_mode), "central (the aggregator clips and adds noise) or distributed (clients do, under --secagg; the default with it)")
      ("dp-clip", po::value(&dp.clip)->default_value(dp.clip), "L2 bound of each client's update (the initial bound with --dp-clip-quantile); > 0 turns DP on")
      ("dp-noise-multiplier", po::value(&dp.noise_multiplier)->default_value(dp.noise_multiplier), "Gaussian noise stddev on the sum of clipped updates, in units of --dp-clip")
      ("dp-target-epsilon", po::value(&dp.target_epsilon)->default_value(dp.target_epsilon), "choose the noise multiplier so that --rounds rounds spend this epsilon (instead of --dp-noise-multiplier)")
      ("dp-delta", po::value(&dp.delta)->default_value(dp.delta, "1e-5"), "delta of the (epsilon, delta) reported and budgeted")
      ("dp-epsilon-budget", po::value(&dp.epsilon_budget)->default_value(dp.epsilon_budget), "stop (Bye to every client) before a round would take epsilon past this; 0 = no limit")
      ("dp-clip-quantile", po::value(&dp.clip_quantile)->default_value(dp.clip_quantile), "adaptive clipping: move the bound towards this quantile of update norms (0 = fixed --dp-clip)")
      ("dp-clip-lr", po::value(&dp.clip_learning_rate)->default_value(dp.clip_learning_rate), "adaptive clipping's geometric learning rate");
  return d;
}

// `--codec help` (or --codec-down help): prints every codec stage with its parameters, from
// the stage registry, and says the program should exit.
inline bool PrintCodecHelpIfAsked(const ServerOptions& o) {
  if (o.codec != "help" && o.codec_down != "help") return false;
  std::fputs(codec::StagesHelp().c_str(), stdout);
  return true;
}

// Moves the parsed flags into `o`; InvalidArgument names the flag.
inline Status ApplyServiceFlags(const ServiceFlags& f, ServerOptions& o) {
  auto chunk = cli::ParseByteSize(f.chunk_size);
  if (!chunk.ok()) return Status::InvalidArgument("--chunk-size: " + chunk.status().message());
  if (*chunk > (1u << 30)) return Status::InvalidArgument("--chunk-size must be at most 1G");
  o.chunk_bytes = static_cast<uint32_t>(*chunk);
  if (!(f.round_timeout_s > 0) || !(f.heartbeat_s > 0) || !(f.heartbeat_timeout_s > 0))
    return Status::InvalidArgument("timeouts and intervals must be positive");
  if (!(f.deadline_min_s >= 0 && f.deadline_min_s <= f.round_timeout_s))
    return Status::InvalidArgument("--deadline-min must be between 0 and --round-timeout");
  o.round_timeout_ms = cli::Millis(f.round_timeout_s);
  o.deadline.min_ms = cli::Millis(f.deadline_min_s);
  o.heartbeat_interval_ms = cli::Millis(f.heartbeat_s);
  o.heartbeat_timeout_ms = cli::Millis(f.heartbeat_timeout_s);
  o.optimizer.name = f.optimizer;
  if (f.dp_mode != "" && f.dp_mode != "central" && f.dp_mode != "distributed")
    return Status::InvalidArgument("--dp-mode must be central or distributed");
  o.dp.distributed = f.dp_mode.empty() ? o.secagg.enabled : f.dp_mode == "distributed";
  if (!(f.secagg_stage_timeout_s > 0)) return Status::InvalidArgument("--secagg-stage-timeout must be positive");
  o.secagg.stage_timeout_ms = cli::Millis(f.secagg_stage_timeout_s);
  if (!(f.upstream_timeout_s > 0 && f.upstream_timeout_s < 86400))
    return Status::InvalidArgument("--upstream-timeout must be in (0, 86400) seconds");
  o.upstream_timeout_ms = cli::Millis(f.upstream_timeout_s);
  return Status::Ok();
}

}  // namespace shoal::aggregator
