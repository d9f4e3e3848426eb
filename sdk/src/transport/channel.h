// Channels (gloo style): the runtime's only view of the network. A Listener is the serving
// side (many peers, each addressed by an opaque routing id); a Channel is one connection to a
// listener. Both carry single-part frames of bytes with deadlines, and nothing else: the bytes
// are the same whatever carries them. Two implementations:
//   transport/zmq/     ZeroMQ ROUTER/DEALER over TCP, with CurveZMQ and a ZAP allow-list;
//   transport/inproc/  an in-process network for runtime unit tests and shoal-sim, with
//                      per-link latency, bandwidth, frame loss and disconnects injected
//                      deterministically from a seed.
// No implementation's types (zmq::message_t, sockets, contexts) appear in this header.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shoal/status.h"

namespace shoal::transport {

// Loopback and in-process endpoints: reachable from this machine only. Anything else needs
// transport security unless the operator explicitly opts out (--insecure).
bool IsLoopbackEndpoint(const std::string& endpoint);

// A frame shared by every peer it goes to; implementations send it without copying.
using SharedFrame = std::shared_ptr<const std::vector<uint8_t>>;

// A received frame: a view of bytes kept alive by `owner` (a ZeroMQ message, or the sender's
// shared frame), so receiving never copies. The bytes may be unaligned (protocol::VerifyFrame
// copies when FlatBuffers would need alignment).
class Message {
 public:
  Message() = default;
  Message(std::span<const uint8_t> bytes, std::shared_ptr<const void> owner)
      : bytes_(bytes), owner_(std::move(owner)) {}
  std::span<const uint8_t> bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }
  // What keeps the bytes alive: holding it keeps a view into them valid past the message.
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  std::span<const uint8_t> bytes_;
  std::shared_ptr<const void> owner_;
};

// Cumulative traffic of one endpoint, in bytes of frames (excluding any framing below them).
struct Traffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t frames_sent = 0;
  uint64_t frames_received = 0;
};

// Counts of connection and handshake events (the in-process network has no handshakes:
// a connection counts as succeeded when it opens).
struct HandshakeStats {
  uint64_t connections = 0;      // connections accepted (listener) or made (channel)
  uint64_t succeeded = 0;        // handshakes completed (with CURVE: authenticated)
  uint64_t failed_auth = 0;      // the key was refused (listener: by ZAP; channel: ours)
  uint64_t failed_protocol = 0;  // bad greeting or command, wrong mechanism, failed decryption
  uint64_t failed_other = 0;     // closed or timed out mid-handshake
  uint64_t disconnected = 0;     // connections closed, after a handshake or during one
  uint64_t failed() const { return failed_auth + failed_protocol + failed_other; }
};

// The serving side. Not thread-safe: one thread calls it.
class Listener {
 public:
  struct Inbound {
    std::string peer;     // routing id of the sender (one per connection)
    std::string user_id;  // the sender's authenticated identity (CURVE: its public key in Z85); else empty
    Message frame;
  };
  virtual ~Listener() = default;
  // Waits up to `timeout` for one frame; nullopt when none arrived.
  virtual StatusOr<std::optional<Inbound>> Recv(std::chrono::milliseconds timeout) = 0;
  // Queues a frame to `peer` without blocking. Returns false when the peer's queue is full
  // (try again later: back-pressure per peer), Unavailable when the peer is gone.
  virtual StatusOr<bool> Send(const std::string& peer, const SharedFrame& frame) = 0;
  virtual const Traffic& traffic() const = 0;
  // The endpoint actually bound (resolves tcp://*:0 to a port).
  virtual std::string endpoint() const = 0;
  virtual const HandshakeStats& handshakes() const = 0;
  // Whether connections are encrypted and authenticated.
  virtual bool secure() const = 0;
};

// One connection to a Listener. Not thread-safe: one thread calls it.
class Channel {
 public:
  virtual ~Channel() = default;
  // Waits up to `timeout` for one frame; nullopt when none arrived.
  virtual StatusOr<std::optional<Message>> Recv(std::chrono::milliseconds timeout) = 0;
  // Queues a frame; blocks at most `timeout` while the connection is not up or its queue is
  // full (then Unavailable).
  virtual Status Send(std::span<const uint8_t> frame,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) = 0;
  // Drops the connection and queued frames and opens a new one (a fresh routing id at the
  // listener).
  virtual Status Reset() = 0;
  virtual const Traffic& traffic() const = 0;
  // The endpoint this channel connects to (for messages).
  virtual const std::string& endpoint() const = 0;

  // Handshakes failed since the last one that succeeded, and the latest reason (e.g. "the
  // key was refused (ZAP status 400)"). The channel retries by itself; the caller decides
  // when to give up (HandshakeFailure below).
  virtual uint64_t handshake_failures_in_a_row() const = 0;
  virtual bool last_failure_was_auth() const = 0;
  virtual const std::string& last_handshake_failure() const = 0;
  virtual const HandshakeStats& handshakes() const = 0;
};

// The error to stop with once `channel`'s handshakes keep failing: PermissionDenied when the
// other side refused our key (naming the key), else Unavailable with the reason and a hint.
// `who` names the other side ("the aggregator at tcp://..."); own_key is our Z85 public key,
// empty without transport security.
Status HandshakeFailure(const Channel& channel, const std::string& who, const std::string& own_key);

}  // namespace shoal::transport
