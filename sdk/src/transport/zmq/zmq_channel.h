// The ZeroMQ implementation of transport/channel.h: ZmqListener (ROUTER) and ZmqChannel
// (DEALER) over TCP (or ZeroMQ's own inproc:// and ipc://), with CurveZMQ when SocketOptions
// carry keys. cppzmq exceptions stop here and become Status.
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
#include "transport/channel.h"
#include "shoal/status.h"
#include "transport/zmq/monitor.h"

namespace shoal::transport {

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

// Serving side (ZeroMQ ROUTER). Inbound user_id: with CURVE, the sender's public key in Z85 as
// the ZAP handler admitted it. Send never copies: the frame is referenced until sent.
class ZmqListener final : public Listener {
 public:
  // Binds. A port already in use is an IoError that says so.
  static StatusOr<std::unique_ptr<ZmqListener>> Bind(zmq::context_t& ctx, const std::string& endpoint,
                                                     const SocketOptions& options);
  StatusOr<std::optional<Inbound>> Recv(std::chrono::milliseconds timeout) override;
  StatusOr<bool> Send(const std::string& peer, const SharedFrame& frame) override;
  const Traffic& traffic() const override { return traffic_; }
  std::string endpoint() const override;
  // Connections and handshakes so far (failed ones are also logged, rate-limited).
  const HandshakeStats& handshakes() const override { return monitor_->stats(); }
  bool secure() const override { return secure_; }

 private:
  ZmqListener(zmq::socket_t s, std::unique_ptr<SocketMonitor> m, bool secure)
      : socket_(std::move(s)), monitor_(std::move(m)), secure_(secure) {}
  void DrainMonitor();
  zmq::socket_t socket_;
  std::unique_ptr<SocketMonitor> monitor_;  // declared after socket_: destroyed before it closes
  bool secure_;
  Traffic traffic_;
};

// One connection (ZeroMQ DEALER). Reconnects by itself with backoff when the listener
// restarts; Reset() makes a fresh socket (and so a fresh identity at the listener). ZeroMQ
// stops retrying after a refused key; the channel then reopens by itself with backoff.
class ZmqChannel final : public Channel {
 public:
  static StatusOr<std::unique_ptr<ZmqChannel>> Connect(zmq::context_t& ctx, const std::string& endpoint,
                                                       const SocketOptions& options);
  ~ZmqChannel() override;
  ZmqChannel(const ZmqChannel&) = delete;
  ZmqChannel& operator=(const ZmqChannel&) = delete;
  StatusOr<std::optional<Message>> Recv(std::chrono::milliseconds timeout) override;
  Status Send(std::span<const uint8_t> frame,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) override;
  Status Reset() override;
  const Traffic& traffic() const override { return traffic_; }
  const std::string& endpoint() const override { return endpoint_; }
  uint64_t handshake_failures_in_a_row() const override { return failures_in_a_row_; }
  bool last_failure_was_auth() const override { return last_failure_auth_; }
  const std::string& last_handshake_failure() const override { return last_failure_; }
  const HandshakeStats& handshakes() const override { return totals_; }

 private:
  ZmqChannel(zmq::context_t& ctx, std::string endpoint, SocketOptions options)
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

}  // namespace shoal::transport
