// The aggregator service behind the public shoal::Server (shoal/server.h): registers clients,
// runs rounds, aggregates with a Strategy, evaluates (the held-out split, or the application's
// Evaluator), checkpoints and writes metrics. One thread, one event loop over a
// transport::Listener (ZeroMQ, or the in-process network of tests and shoal-sim): Create does
// all setup, Run() or Turn() only the loop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shoal/server.h"
#include "shoal/status.h"
#include "shoal/trainer.h"
#include "aggregate/strategy.h"
#include "runtime/server/deadline.h"
#include "aggregate/wrappers/dp.h"
#include "aggregate/wrappers/secagg.h"
#include "transport/channel.h"

namespace shoal::aggregator {

// The report and option types are public (shoal/server.h); the service adds what only
// Shoal's own programs use.
using shoal::ClientStatus;
using shoal::LiveStatus;
using shoal::RoundReport;

struct AggregatorOptions : ServerOptions {
  AggregatorOptions() = default;
  explicit AggregatorOptions(const ServerOptions& o) : ServerOptions(o) {}
  // Talk to the parent over channels made by this (shoal-sim's in-process network: one per
  // connection attempt) instead of ZeroMQ to `upstream`; the upstream keys must then be empty.
  std::function<std::unique_ptr<transport::Channel>()> upstream_channel;
};

class Service {
 public:
  // Loads the dataset, builds the model (or restores the checkpoint), binds the socket.
  // Every failure is one clear message (port in use, missing dataset, bad flag, ...).
  static StatusOr<std::unique_ptr<Service>> Create(const AggregatorOptions& options);
  // The same over a listener the caller made (the in-process network of tests and shoal-sim):
  // options.listen, secret_key, allow_keys and insecure do not apply (InvalidArgument if keys
  // are given: such a listener has no transport security).
  static StatusOr<std::unique_ptr<Service>> Create(const AggregatorOptions& options,
                                                   std::unique_ptr<transport::Listener> listener);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Serves until `stop` becomes true (returns OK) or --rounds rounds are done (clients get
  // Bye; returns OK). Errors only for failures that make serving impossible. Whenever
  // `reload` is set (SIGHUP), clears it and re-reads the allow-list: removed keys are refused
  // from the next handshake, and their live connections are dropped at once.
  Status Run(const std::atomic<bool>& stop, std::atomic<bool>* reload = nullptr, const std::atomic<bool>* finish = nullptr);
  // One turn of Run's loop, waiting at most about `max_wait` for a frame: nullopt while the
  // run goes on, the status Run would return once it is over (Server::Poll). Once `finish` is
  // set, the run ends as after its last round: Bye to every client.
  std::optional<Status> Turn(const std::atomic<bool>& stop, std::atomic<bool>* reload, std::chrono::milliseconds max_wait,
                             const std::atomic<bool>* finish = nullptr);
  // The application's evaluator in place of the held-out split's; before the first Turn/Run.
  void SetEvaluator(std::shared_ptr<Evaluator> evaluator);

  // The endpoint actually bound (e.g. the port chosen for tcp://127.0.0.1:0).
  std::string endpoint() const;
  // The last completed round (after a resume: counting the checkpointed ones). Read it while
  // Run is not running.
  uint64_t rounds_completed() const;
  // The global model's hash (BLAKE2b-256, hex): after Create, the resumed or initial model's.
  // Read it while Run is not running.
  std::string model_hash() const;

  class Impl;

 private:
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::aggregator
