// ZAP handler (ZeroMQ RFC 27): decides, for every CURVE handshake in a context, whether the
// client's public key may connect. It admits exactly the keys of an AllowList, which can be
// replaced at any time (SIGHUP); a replaced list applies from the next handshake. The user-id
// it returns is the key in Z85, which ZeroMQ attaches to every message of that connection
// ("User-Id" metadata): the authenticated identity used by every layer above.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "crypto/keys.h"
#include "shoal/status.h"

namespace shoal::transport {

// The ZAP domain Shoal's server sockets use.
inline constexpr const char* kZapDomain = "shoal";

class ZapHandler {
 public:
  // Binds inproc://zeromq.zap.01 in `ctx` and serves it on its own thread. Must run before any
  // CURVE server socket of the context binds: libzmq admits every key when no handler exists.
  static StatusOr<std::unique_ptr<ZapHandler>> Start(zmq::context_t& ctx, std::shared_ptr<const crypto::AllowList> keys);
  ~ZapHandler();  // stops the thread; destroy before the context
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // Thread-safe. Handshakes from now on are checked against `keys`.
  void Replace(std::shared_ptr<const crypto::AllowList> keys);
  std::shared_ptr<const crypto::AllowList> allow_list() const;

  struct Stats {
    uint64_t allowed = 0;
    uint64_t refused = 0;  // unlisted key, other mechanism or domain, malformed request
  };
  Stats stats() const { return {allowed_.load(), refused_.load()}; }

 private:
  explicit ZapHandler(std::shared_ptr<const crypto::AllowList> keys) : keys_(std::move(keys)) {}
  void Loop(zmq::socket_t socket);
  void Serve(zmq::socket_t& socket);

  mutable std::mutex mu_;
  std::shared_ptr<const crypto::AllowList> keys_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> allowed_{0}, refused_{0};
  std::thread thread_;
};

}  // namespace shoal::transport
