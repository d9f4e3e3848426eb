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

#include "shoal/status.h"

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
    std::string peer;  // routing id of the sender
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

 private:
  explicit ServerChannel(zmq::socket_t s) : socket_(std::move(s)) {}
  zmq::socket_t socket_;
  Traffic traffic_;
};

// Client side: one peer (ZeroMQ DEALER). Reconnects by itself with backoff when the peer
// restarts; Reset() makes a fresh socket (and so a fresh identity at the server).
class ClientChannel {
 public:
  static StatusOr<std::unique_ptr<ClientChannel>> Connect(zmq::context_t& ctx, const std::string& endpoint,
                                                          const SocketOptions& options);
  StatusOr<std::optional<zmq::message_t>> Recv(std::chrono::milliseconds timeout);
  // Queues a frame; blocks at most `timeout` when the send queue is full.
  Status Send(std::span<const uint8_t> frame, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  // Closes the socket, dropping queued frames, and connects a new one.
  Status Reset();
  const Traffic& traffic() const { return traffic_; }

 private:
  ClientChannel(zmq::context_t& ctx, std::string endpoint, SocketOptions options)
      : ctx_(ctx), endpoint_(std::move(endpoint)), options_(options) {}
  Status Open();
  zmq::context_t& ctx_;
  std::string endpoint_;
  SocketOptions options_;
  zmq::socket_t socket_;
  Traffic traffic_;
};

}  // namespace shoal::transport
