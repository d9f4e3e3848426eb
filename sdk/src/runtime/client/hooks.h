// What the simulator (and runtime unit tests) change in a Client: the channel it talks over,
// where it trains, and where its replica of the global model lives. Internal: an application
// gets the defaults through shoal/client.h.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shoal/client.h"
#include "transport/channel.h"

namespace shoal {

// Replicas of the global model by hash, shared by every client that holds the same one: N
// virtual clients that are bit-identical replicas of one aggregator hold one copy per model
// version still referenced, not N. Thread-safe.
class ReplicaCache {
 public:
  using Replica = std::shared_ptr<const std::vector<float>>;
  // The cached replica with this hash if one is alive, else `model`, now cached.
  Replica Intern(const std::string& hash, std::vector<float> model);
  size_t live() const;  // distinct replicas still referenced

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::weak_ptr<const std::vector<float>>> by_hash_;
};

// A task's model as it came from the aggregator, once the replica is in place and its hash
// checked: what an edge aggregator relays to its own clients (runtime/server/edge.h).
struct ReceivedModel {
  uint64_t round = 0;
  bool delta = false;             // the download codec's delta (else the full model, or unchanged)
  bool unchanged = false;         // no payload: the replica already was the model
  std::vector<uint8_t> payload;   // delta only: the codec payload, as received
  std::string base_hash;          // delta only: the model it applies to
  uint64_t delta_round = 0;       // delta only: the round whose aggregate it is
  std::string model_hash;         // the model now held
};

// Points a round reaches on a client, in order (the secure-aggregation ones only under
// secure aggregation): what shoal-sim's --churn-at kills a client at.
enum class RoundPoint {
  kTask,         // the round's task arrived and its model is in place; nothing trained or sent yet
  kSharesSent,   // secure aggregation: this client's key shares left for its neighbours
  kUpdateSent,   // the whole update (plain or masked) left
  kUnmaskAsked,  // secure aggregation: the survivor set arrived, before this client signs it
};

struct ClientHooks {
  // Talk over this channel instead of connecting to options.connect with ZeroMQ (the
  // options' keys must then be empty). Default: ZeroMQ.
  std::unique_ptr<transport::Channel> channel;
  // Run the trainer inside Poll on the caller's thread instead of on the client's own worker
  // thread, so that thousands of clients need no thread each. Poll then blocks while it trains.
  bool train_inline = false;
  // Share replicas through this cache (it must outlive the client). Default: the client's own.
  std::shared_ptr<ReplicaCache> replicas;
  // An edge aggregator's link to its parent (runtime/server/edge.h); both optional.
  // on_model: on the loop thread after each task's model is in place, before training starts.
  std::function<void(ReceivedModel)> on_model;
  // partial_sum: when training ends, bytes to send instead of the codec's encoding of the
  // trainer's delta, as an Update of encoding PartialSum weighted by the TrainResult's
  // num_examples; nullopt sends nothing (the round failed; the trainer's status says why).
  std::function<std::optional<std::vector<uint8_t>>(uint64_t round)> partial_sum;
  // Fault injection (the simulator): called on the loop thread as a round reaches each point.
  std::function<void(RoundPoint, uint64_t round)> at_point;
};

class ClientFactory {
 public:
  static std::unique_ptr<Client> Make(ClientOptions options, std::unique_ptr<Trainer> trainer, ClientHooks hooks);
};

}  // namespace shoal
