// Channels (gloo style): framed messages with deadlines. The ZeroMQ implementation carries
// Shoal between processes; the same classes over "inproc://" endpoints serve tests and the
// simulator. cppzmq exceptions stop here and become Status.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "crypto/keys.h"
#include "shoal/status.h"
#include "transport/monitor.h"

namespace shoal::transport {

// Loopback and in-process endpoints: reachable from this machine only. Anything else needs
// transport security unless the operator explicitly opts out (--insecure).
bool IsLoopbackEndpoint(const std::string& endpoint);

struct SocketOptions {
  // Largest inbound frame; ZeroMQ drops the connection of a peer that sends more (ZMQ_MAXMSGSIZE).
  // Default: 16 MiB chunk + 256 KiB envelope room.
  int64_t max_frame_bytes = (int64_t{16} << 20) + (int64_t{256} << 10);
  // Queue limits in frames (ZMQ_SNDHWM / ZMQ_RCVHWM). Default: 1000.
  int send_hwm = 1000;
  int recv_hwm = 1000;
  // ZMTP-level heartbeats detect dead TCP connections (ZMQ_HEARTBEAT_IVL/TIMEOUT). 0 = off.
  int zmtp_heartbeat_ms = 2000;
  // How long close() waits to flush queued frames (ZMQ_LINGER). Default: 2 s.
  int linger_ms = 2000;
  // A connection that has not finished its ZMTP/CURVE handshake this long after it opened is
  // closed (ZMQ_HANDSHAKE_IVL), so idle or stalled connections cannot pile up. Default: 5 s.
  int handshake_ms = 5000;
  // CurveZMQ. Null: no security (ZeroMQ's NULL mechanism). Server: its key pair; the socket
  // becomes a CURVE server in ZAP domain kZapDomain, and a ZapHandler must run in the same
  // context. Client: its own key pair, with `server_key` the server's public key (pinned: a
  // server without the matching secret key cannot complete the handshake).
  std::shared_ptr<const crypto::KeyPair> curve;
  std::array<uint8_t, crypto::kCurveKeyBytes> server_key{};  // client only
};

// A frame shared by every peer it goes to; the socket sends it without copying.
using SharedFrame = std::shared_ptr<const std::vector<uint8_t>>;

// Cumulative traffic of one socket, in bytes of frames (excluding ZMTP framing).
struct Traffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t frames_sent = 0;
  uint64_t frames_received = 0;
};

// Server side: many peers, each addressed by an opaque routing id (ZeroMQ ROUTER).
class ServerChannel {
 public:
  struct Inbound {
    std::string peer;     // routing id of the sender (one per connection)
    std::string user_id;  // CURVE: the sender's public key in Z85, as the ZAP handler admitted it; else empty
    zmq::message_t frame;
  };
  // Binds. A port already in use is an IoError that says so.
  static StatusOr<std::unique_ptr<ServerChannel>> Bind(zmq::context_t& ctx, const std::string& endpoint,
                                                       const SocketOptions& options);
  // Waits up to `timeout` for one frame; nullopt when none arrived.
  StatusOr<std::optional<Inbound>> Recv(std::chrono::milliseconds timeout);
  // Queues a frame to `peer` without blocking or copying. Returns false when the peer's queue
  // is full (try again later: ZeroMQ applies back-pressure per peer), Unavailable when the
  // peer is no longer connected.
  StatusOr<bool> Send(const std::string& peer, const SharedFrame& frame);
  const Traffic& traffic() const { return traffic_; }
  // The endpoint actually bound (resolves tcp://*:0 to a port).
  std::string endpoint() const;
  // Connections and handshakes so far (failed ones are also logged, rate-limited).
  const HandshakeStats& handshakes() const { return monitor_->stats(); }
  bool secure() const { return secure_; }

 private:
  ServerChannel(zmq::socket_t s, std::unique_ptr<SocketMonitor> m, bool secure)
      : socket_(std::move(s)), monitor_(std::move(m)), secure_(secure) {}
  void DrainMonitor();
  zmq::socket_t socket_;
  std::unique_ptr<SocketMonitor> monitor_;  // declared after socket_: destroyed before it closes
  bool secure_;
  Traffic traffic_;
};

// Client side: one peer (ZeroMQ DEALER). Reconnects by itself with backoff when the peer
// restarts; Reset() makes a fresh socket (and so a fresh identity at the server).
class ClientChannel {
 public:
  static StatusOr<std::unique_ptr<ClientChannel>> Connect(zmq::context_t& ctx, const std::string& endpoint,
                                                          const SocketOptions& options);
  ~ClientChannel();
  ClientChannel(const ClientChannel&) = delete;
  ClientChannel& operator=(const ClientChannel&) = delete;
  StatusOr<std::optional<zmq::message_t>> Recv(std::chrono::milliseconds timeout);
  // Queues a frame; blocks at most `timeout` when the send queue is full.
  Status Send(std::span<const uint8_t> frame, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  // Closes the socket, dropping queued frames, and connects a new one.
  Status Reset();
  const Traffic& traffic() const { return traffic_; }

  // Handshakes failed since the last one that succeeded, and the latest reason (e.g. "the
  // key was refused (ZAP status 400)"). ZeroMQ stops retrying after a refused key; the
  // channel then reopens by itself with backoff, so the caller only decides when to give up.
  uint64_t handshake_failures_in_a_row() const { return failures_in_a_row_; }
  bool last_failure_was_auth() const { return last_failure_auth_; }
  const std::string& last_handshake_failure() const { return last_failure_; }
  const HandshakeStats& handshakes() const { return totals_; }

 private:
  ClientChannel(zmq::context_t& ctx, std::string endpoint, SocketOptions options)
      : ctx_(ctx), endpoint_(std::move(endpoint)), options_(std::move(options)) {}
  Status Open();
  void Close();
  // Reads monitor events; reopens the socket when a refused handshake left it idle.
  void WatchHandshakes();
  zmq::context_t& ctx_;
  std::string endpoint_;
  SocketOptions options_;
  zmq::socket_t socket_;
  std::unique_ptr<SocketMonitor> monitor_;
  Traffic traffic_;
  HandshakeStats totals_;  // over every socket this channel opened
  uint64_t failures_in_a_row_ = 0;
  bool attempt_failed_ = false;  // the current connection attempt has already failed
  bool last_failure_auth_ = false;
  std::string last_failure_;
  std::optional<std::chrono::steady_clock::time_point> reopen_at_;
};

// The error to stop with once `channel`'s handshakes keep failing: PermissionDenied when the
// other side refused our key (naming the key), else Unavailable with the reason and a hint.
// `who` names the other side ("the aggregator at tcp://..."); own_key is our Z85 public key,
// empty without transport security.
Status HandshakeFailure(const ClientChannel& channel, const std::string& who, const std::string& own_key);

}  // namespace shoal::transport
