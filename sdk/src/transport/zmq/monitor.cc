#include "transport/zmq/monitor.h"

#include <zmq.h>

#include <atomic>
#include <cstdio>
#include <cstring>

namespace shoal::transport {
namespace {

constexpr int kEvents = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                        ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                        ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

void CountEvent(HandshakeStats& s, const MonitorEvent& e) {
  switch (e.event) {
    case ZMQ_EVENT_CONNECTED:
    case ZMQ_EVENT_ACCEPTED: ++s.connections; break;
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: ++s.succeeded; break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: ++s.failed_auth; break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL: ++s.failed_protocol; break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: ++s.failed_other; break;
    case ZMQ_EVENT_DISCONNECTED: ++s.disconnected; break;
    default: break;
  }
}

bool MonitorEvent::IsHandshakeFailure() const {
  return event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
         event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
}

std::string MonitorEvent::Describe() const {
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      return "the key was refused (ZAP status " + std::to_string(value) + ")";
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      switch (value) {
        case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
          return "security mechanisms differ (one side uses CURVE, the other does not)";
        case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
          return "a CURVE message did not decrypt (wrong server key, or replayed or forged traffic)";
        case ZMQ_PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE:
          return "the CURVE key exchange failed";
        case ZMQ_PROTOCOL_ERROR_ZMTP_INVALID_SEQUENCE:
          return "a CURVE message arrived out of sequence (replayed traffic?)";
        case ZMQ_PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND:
        case ZMQ_PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_UNSPECIFIED:
        case ZMQ_PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_HELLO:
        case ZMQ_PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_INITIATE:
        case ZMQ_PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_ERROR:
        case ZMQ_PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_READY:
        case ZMQ_PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_WELCOME:
          return "a malformed handshake command (protocol error " + Hex(value) + ")";
        default:
          return "a handshake protocol error (" + Hex(value) + ")";
      }
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      return std::string("the connection closed during the handshake (") + std::strerror(static_cast<int>(value)) + ")";
    default:
      return "event " + Hex(event);
  }
}

StatusOr<std::unique_ptr<SocketMonitor>> SocketMonitor::Attach(zmq::context_t& ctx, zmq::socket_t& socket) {
  static std::atomic<uint64_t> next{0};
  const std::string endpoint = "inproc://shoal-monitor-" + std::to_string(next.fetch_add(1));
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), kEvents) != 0)
    return Status::Internal(std::string("zmq_socket_monitor failed: ") + zmq_strerror(zmq_errno()));
  try {
    zmq::socket_t pair(ctx, zmq::socket_type::pair);
    pair.set(zmq::sockopt::linger, 0);
    pair.connect(endpoint);
    return std::unique_ptr<SocketMonitor>(new SocketMonitor(socket.handle(), std::move(pair)));
  } catch (const zmq::error_t& e) {
    zmq_socket_monitor(socket.handle(), nullptr, 0);
    return Status::Internal(std::string("cannot read the socket monitor: ") + e.what());
  }
}

SocketMonitor::~SocketMonitor() {
  zmq_socket_monitor(monitored_, nullptr, 0);
}

std::vector<MonitorEvent> SocketMonitor::Drain() {
  std::vector<MonitorEvent> out;
  try {
    for (;;) {
      // Each event is two frames: 2-byte event + 4-byte value, then the endpoint.
      zmq::message_t head, addr;
      if (!pair_.recv(head, zmq::recv_flags::dontwait)) break;
      if (!head.more() || !pair_.recv(addr, zmq::recv_flags::dontwait) || head.size() != 6) continue;
      MonitorEvent e;
      std::memcpy(&e.event, head.data(), 2);
      std::memcpy(&e.value, static_cast<const char*>(head.data()) + 2, 4);
      e.address = addr.to_string();
      CountEvent(stats_, e);
      out.push_back(std::move(e));
    }
  } catch (const zmq::error_t&) {
    // The context is shutting down: no more events.
  }
  return out;
}

}  // namespace shoal::transport
