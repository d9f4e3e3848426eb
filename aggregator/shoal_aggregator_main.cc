// shoal-aggregator: the federated training service (DESIGN.md §6).
#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <cmath>
#include <fstream>
#include <iostream>

#include "core/cli.h"
#include "core/cli_options.h"
#include "runtime/server/service.h"
#include "shoal/config.h"

namespace po = boost::program_options;
using shoal::aggregator::AggregatorOptions;

namespace {

constexpr const char* kProgram = "shoal-aggregator";

uint32_t Millis(double seconds) { return static_cast<uint32_t>(std::llround(seconds * 1000.0)); }

}  // namespace

int main(int argc, char** argv) {
  AggregatorOptions o;
  std::string config_file, log_level, chunk_size, optimizer;
  double round_timeout_s = 60, heartbeat_s = 1, heartbeat_timeout_s = 10;

  po::options_description general("General");
  general.add_options()
      ("help,h", "show this help and exit")
      ("version", "print the version and exit")
      ("config", po::value(&config_file), "read options from FILE (key = value lines, same names as the flags)")
      ("log-level", po::value(&log_level)->default_value("info"), "trace, debug, info, warn, error or off");

  po::options_description serving("Service");
  serving.add_options()
      ("listen", po::value(&o.listen)->default_value(o.listen), "ZeroMQ endpoint to bind, e.g. tcp://*:7070")
      ("rounds", po::value(&o.rounds)->default_value(0), "stop after N completed rounds and send clients Bye (0 = serve until stopped)")
      ("min-clients", po::value(&o.min_clients)->default_value(o.min_clients), "registered clients needed before a round starts")
      ("fraction", po::value(&o.fraction)->default_value(o.fraction), "share of registered clients selected per round, in (0, 1]")
      ("min-results", po::value(&o.min_results)->default_value(o.min_results), "updates needed to change the model in a round")
      ("round-timeout", po::value(&round_timeout_s)->default_value(round_timeout_s), "seconds a round waits for updates")
      ("heartbeat-interval", po::value(&heartbeat_s)->default_value(heartbeat_s), "seconds between client heartbeats")
      ("heartbeat-timeout", po::value(&heartbeat_timeout_s)->default_value(heartbeat_timeout_s), "seconds of silence before a client is dropped")
      ("chunk-size", po::value(&chunk_size)->default_value("16M"), "payload chunk size on the wire (bytes, or with K/M/G)")
      ("max-clients", po::value(&o.max_clients)->default_value(o.max_clients), "registration cap")
      ("max-update-norm", po::value(&o.max_update_norm)->default_value(o.max_update_norm), "reject client updates with a larger L2 norm (0 = no bound)")
      ("secret-key", po::value(&o.secret_key), "this aggregator's key file (PREFIX.key from shoal-keygen): CurveZMQ encryption and authentication")
      ("allow-keys", po::value(&o.allow_keys), "client public keys to admit: a file (one Z85 key per line) or a directory of .pub files; re-read on SIGHUP")
      ("insecure", po::bool_switch(&o.insecure), "serve a non-loopback --listen without encryption or authentication (experiments only)")
      ("recv-hwm", po::value(&o.recv_hwm)->default_value(o.recv_hwm), "frames queued per client connection before ZeroMQ stops reading it (bounds memory)")
      ("metrics-out", po::value(&o.metrics_out), "append one JSON object per round to FILE")
      ("checkpoint-dir", po::value(&o.checkpoint_dir), "checkpoint every completed round into DIR")
      ("resume", po::bool_switch(&o.resume), "continue from --checkpoint-dir's last completed round")
      ("device", po::value(&o.device)->default_value(o.device), "evaluation backend: auto, cpu, cuda[:N]")
      ("codec", po::value(&o.codec)->default_value(o.codec), "upload codec, e.g. int8, ef|topk:ratio=0.01|int8, demo:chunk=64,topk=8,bits=1 (none = dense fp32)")
      ("codec-down", po::value(&o.codec_down), "download codec for the global delta (default: same as --codec)");

  po::options_description task("Task (sent to every client at Welcome)");
  task.add_options()
      ("model", po::value(&o.model)->default_value(o.model), "model spec: mlp, mlp:H1,H2,..., mlp:H1,act=gelu, linear")
      ("dataset", po::value(&o.dataset)->default_value(o.dataset), "digits, csv:PATH or idx:IMAGES,LABELS")
      ("data-dir", po::value(&o.data_dir), "dataset cache (default $SHOAL_DATA_DIR or ~/.cache/shoal)")
      ("seed", po::value(&o.seed)->default_value(o.seed), "seed for model init, data split and client sampling")
      ("test-fraction", po::value(&o.test_fraction)->default_value(o.test_fraction), "held-out share of the dataset")
      ("strategy", po::value(&o.strategy.name)->default_value(o.strategy.name), "fedavg, fedprox or demo (sign of the mean, for --client-optimizer demo)")
      ("prox-mu", po::value(&o.strategy.prox_mu)->default_value(o.strategy.prox_mu), "FedProx proximal coefficient")
      ("server-lr", po::value(&o.strategy.server_learning_rate)->default_value(o.strategy.server_learning_rate), "scale of the averaged update")
      ("lr", po::value(&o.strategy.learning_rate)->default_value(o.strategy.learning_rate), "client learning rate")
      ("local-epochs", po::value(&o.strategy.local_epochs)->default_value(o.strategy.local_epochs), "local passes over the data per round")
      ("local-steps", po::value(&o.strategy.local_steps)->default_value(o.strategy.local_steps), "if > 0: exactly this many local minibatch steps per round")
      ("batch-size", po::value(&o.batch_size)->default_value(o.batch_size), "client minibatch size")
      ("client-optimizer", po::value(&optimizer)->default_value("sgd"), "client optimizer: sgd, adamw or demo (DeMo; needs --strategy demo)")
      ("client-demo-decay", po::value(&o.optimizer.demo_decay)->default_value(o.optimizer.demo_decay), "demo: momentum decay")
      ("client-demo-chunk", po::value(&o.optimizer.demo_chunk)->default_value(o.optimizer.demo_chunk), "demo: DCT chunk side")
      ("client-demo-topk", po::value(&o.optimizer.demo_topk)->default_value(o.optimizer.demo_topk), "demo: DCT coefficients extracted per chunk")
      ("momentum", po::value(&o.optimizer.momentum)->default_value(o.optimizer.momentum), "sgd momentum")
      ("nesterov", po::bool_switch(&o.optimizer.nesterov), "sgd Nesterov momentum")
      ("weight-decay", po::value(&o.optimizer.weight_decay)->default_value(o.optimizer.weight_decay), "weight decay");

  po::options_description all("Usage: shoal-aggregator [options]\n\n"
                              "Runs federated training rounds over ZeroMQ: clients join with Hello, train the\n"
                              "model on their own data, and send updates that are averaged into the global model.\n"
                              "Example:\n  shoal-aggregator --listen tcp://*:7070 --rounds 30 --min-clients 4 \\\n"
                              "    --model mlp --dataset digits --metrics-out run.jsonl --checkpoint-dir ckpt\n");
  all.add(general).add(serving).add(task);

  po::variables_map vm;
  if (auto exit_code = shoal::cli::ParseOptions(argc, argv, all, vm, kProgram)) return *exit_code;
  if (auto st = shoal::cli::InitLogging(log_level, "aggregator"); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  auto chunk = shoal::cli::ParseByteSize(chunk_size);
  if (!chunk.ok()) return shoal::cli::Fail(kProgram, "--chunk-size: " + chunk.status().message(), 2);
  if (*chunk > (1u << 30)) return shoal::cli::Fail(kProgram, "--chunk-size must be at most 1G", 2);
  o.chunk_bytes = static_cast<uint32_t>(*chunk);
  if (!(round_timeout_s > 0) || !(heartbeat_s > 0) || !(heartbeat_timeout_s > 0))
    return shoal::cli::Fail(kProgram, "timeouts and intervals must be positive", 2);
  o.round_timeout_ms = Millis(round_timeout_s);
  o.heartbeat_interval_ms = Millis(heartbeat_s);
  o.heartbeat_timeout_ms = Millis(heartbeat_timeout_s);
  o.optimizer.name = optimizer;

  const auto& stop = shoal::cli::InstallStopSignals();
  auto& reload = shoal::cli::InstallReloadSignal();
  auto service = shoal::aggregator::Service::Create(o);
  if (!service.ok()) {
    const bool usage = service.status().code() == shoal::StatusCode::kInvalidArgument;
    return shoal::cli::Fail(kProgram, service.status().message(), usage ? 2 : 1);
  }
  shoal::Status st = (*service)->Run(stop, &reload);
  if (!st.ok()) return shoal::cli::Fail(kProgram, st.message());
  return 0;
}
