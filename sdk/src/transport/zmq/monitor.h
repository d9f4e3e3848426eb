// Socket monitor (zmq_socket_monitor): connection and handshake events of one socket, read
// without blocking from an inproc PAIR socket. The channels use it to count failed CURVE
// handshakes (a refused key, a wrong server key, garbage from a scanner) and to tell a client
// why it cannot get in, instead of letting it wait in silence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "shoal/status.h"
#include "transport/channel.h"

namespace shoal::transport {

struct MonitorEvent;

struct MonitorEvent {
  uint16_t event = 0;   // ZMQ_EVENT_*
  uint32_t value = 0;   // ZAP status code, ZMQ_PROTOCOL_ERROR_*, errno or fd, by event
  std::string address;  // the endpoint (the peer's for accepted connections)
  bool IsHandshakeFailure() const;
  // One line for logs and client errors, e.g. "the key was refused (ZAP status 400)".
  std::string Describe() const;
};

// Adds one event to the counts (HandshakeStats is transport-neutral, in channel.h).
void CountEvent(HandshakeStats& stats, const MonitorEvent& e);

class SocketMonitor {
 public:
  // Starts monitoring `socket`; call before it binds or connects so no event is missed.
  // Destroy the monitor before the socket closes.
  static StatusOr<std::unique_ptr<SocketMonitor>> Attach(zmq::context_t& ctx, zmq::socket_t& socket);
  ~SocketMonitor();
  SocketMonitor(const SocketMonitor&) = delete;
  SocketMonitor& operator=(const SocketMonitor&) = delete;

  // Reads every pending event without blocking, updates stats(), and returns the events.
  std::vector<MonitorEvent> Drain();
  const HandshakeStats& stats() const { return stats_; }
  // For zmq::poll alongside the monitored socket.
  zmq::socket_t& events_socket() { return pair_; }

 private:
  SocketMonitor(void* monitored, zmq::socket_t pair) : monitored_(monitored), pair_(std::move(pair)) {}
  void* monitored_;  // the monitored socket's handle
  zmq::socket_t pair_;
  HandshakeStats stats_;
};

}  // namespace shoal::transport
