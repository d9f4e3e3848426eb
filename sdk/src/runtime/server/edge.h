// Hierarchical aggregation: an edge aggregator (shoal-aggregator --upstream EP) is an
// aggregator for its own clients and, with the same protocol, a client of its parent.
//
// EdgeLink is the client side: a shoal::Client on its own thread whose trainer does not train
// but hands each of the parent's rounds (its number, settings and model, and the download
// delta as it came) to the edge's service, and waits for the service to return the round's
// partial sum: the exact sum (ExactSum) of its clients' updates weighted by their example
// counts, which goes up serialized as an Update of encoding PartialSum. The parent merges it
// exactly, so a tree of aggregators gives the model a flat federation of the same clients
// gives, bit for bit. The edge relays the parent's task (model, codecs, feature map, seed)
// to its clients unchanged, and the parent's delta payload too, so its clients' replicas
// are the parent's model.
//
// Losing the parent: the client reconnects with backoff; when it gives up, the link starts a
// fresh one, forever, while the edge's service keeps its clients. A refusal that cannot heal
// (a revoked key, the parent's secure aggregation) ends the link with that error; the parent's
// Bye ends it with OK. Thread-safe: the service's thread calls everything but the trainer's
// side, which runs on the client's threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shoal/client.h"
#include "shoal/status.h"
#include "shoal/trainer.h"
#include "aggregate/weighted_mean.h"
#include "runtime/client/hooks.h"

namespace shoal::aggregator {

// One round the parent asked for.
struct EdgeOrder {
  uint64_t round = 0;
  RoundConfig config;
  std::vector<float> model;           // the parent's model for the round
  std::string model_hash;
  std::optional<ReceivedModel> received;  // how it came (a delta to relay, unchanged, in full)
};

// The edge's accumulator: the plain exact sum of its clients' updates (no strategy: the
// parent's applies to the sum of everything), which goes up as it is.
class PartialSumAccumulator final : public WeightedMean {
 public:
  explicit PartialSumAccumulator(size_t n) : WeightedMean(n, 1.0) {}
  using WeightedMean::sum;
};

class EdgeLink {
 public:
  // Starts the link (options: the parent's endpoint, this edge's name there, its keys) and
  // waits up to `task_timeout_ms` for the parent's task: Unavailable with what to check
  // when none comes, or the client's error when the parent refuses the edge.
  // `channel`, when set, makes the channel of each connection attempt (ClientHooks::channel).
  static StatusOr<std::unique_ptr<EdgeLink>> Start(ClientOptions options, uint32_t task_timeout_ms,
                                                   std::function<std::unique_ptr<transport::Channel>()> channel = {});
  ~EdgeLink();
  EdgeLink(const EdgeLink&) = delete;
  EdgeLink& operator=(const EdgeLink&) = delete;

  const TaskConfig& task() const { return task_; }
  // The parent's newest round not yet taken, or nullopt.
  std::optional<EdgeOrder> TakeOrder();
  // Whether the parent has since moved past `round` (the edge's round for it is moot).
  bool Superseded(uint64_t round) const;
  // The round's result: the serialized partial sum, its total weight and the clients' mean
  // train loss; or Fail with why. Ignored for a round the parent no longer waits for.
  void Deliver(uint64_t round, std::vector<uint8_t> partial_sum, uint64_t weight, double train_loss);
  void Fail(uint64_t round, const std::string& why);
  // Set once the link is over: OK after the parent's Bye (reason in bye_reason()), else the
  // error that ended it.
  std::optional<Status> finished() const;
  std::string bye_reason() const;
  bool connected() const { return connected_.load(); }

 private:
  class Trainer;
  EdgeLink() = default;
  void Loop(ClientOptions options, std::function<std::unique_ptr<transport::Channel>()> channel);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  TaskConfig task_;                 // the first task (the service is built on it)
  bool have_task_ = false;
  std::optional<std::string> task_changed_;  // the parent's task changed: why the link ends
  std::optional<ReceivedModel> received_;    // the last task's model as it came
  std::optional<EdgeOrder> order_;           // waiting for the service
  uint64_t current_round_ = 0;               // the round the parent's trainer call waits on
  struct Result {
    uint64_t round = 0;
    std::optional<std::vector<uint8_t>> bytes;  // nullopt: failed
    uint64_t weight = 0;
    double train_loss = 0.0;
  };
  std::optional<Result> result_;
  std::optional<Status> finished_;
  std::string bye_reason_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::mutex client_mu_;
  Client* client_ = nullptr;  // the live client, for Cancel (guarded by client_mu_)
  std::thread thread_;
};

}  // namespace shoal::aggregator
