// What the simulator (and runtime unit tests) change in a Client: the channel it talks over,
// where it trains, and where its replica of the global model lives. Internal: an application
// gets the defaults through shoal/client.h.
#pragma once

#include <map>
#include <memory>
#include <mutex>
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

struct ClientHooks {
  // Talk over this channel instead of connecting to options.connect with ZeroMQ (the
  // options' keys must then be empty). Default: ZeroMQ.
  std::unique_ptr<transport::Channel> channel;
  // Run the trainer inside Poll on the caller's thread instead of on the client's own worker
  // thread, so that thousands of clients need no thread each. Poll then blocks while it trains.
  bool train_inline = false;
  // Share replicas through this cache (it must outlive the client). Default: the client's own.
  std::shared_ptr<ReplicaCache> replicas;
};

class ClientFactory {
 public:
  static std::unique_ptr<Client> Make(ClientOptions options, std::unique_ptr<Trainer> trainer, ClientHooks hooks);
};

}  // namespace shoal
