#include <cerrno>

#include "transport/channel.h"

namespace shoal::transport {
namespace {

void ApplyCommon(zmq::socket_t& s, const SocketOptions& o) {
  s.set(zmq::sockopt::maxmsgsize, o.max_frame_bytes);
  s.set(zmq::sockopt::sndhwm, o.send_hwm);
  s.set(zmq::sockopt::rcvhwm, o.recv_hwm);
  s.set(zmq::sockopt::linger, o.linger_ms);
  if (o.zmtp_heartbeat_ms > 0) {
    s.set(zmq::sockopt::heartbeat_ivl, o.zmtp_heartbeat_ms);
    s.set(zmq::sockopt::heartbeat_timeout, o.zmtp_heartbeat_ms * 3);
    s.set(zmq::sockopt::heartbeat_ttl, o.zmtp_heartbeat_ms * 3);
  }
}

// Shoal frames are single-part; drops any further parts of a multi-part message after `last`.
void DiscardRemainingParts(zmq::socket_t& s, const zmq::message_t& last) {
  bool more = last.more();
  while (more) {
    zmq::message_t extra;
    if (!s.recv(extra, zmq::recv_flags::dontwait)) break;
    more = extra.more();
  }
}

std::string Explain(const zmq::error_t& e, const std::string& endpoint) {
  switch (e.num()) {
    case EADDRINUSE:
      return "address " + endpoint + " is already in use (another shoal-aggregator running?); pick another port with --listen";
    case EADDRNOTAVAIL:
      return "address " + endpoint + " is not available on this machine";
    case EINVAL:
    case EPROTONOSUPPORT:
      return "bad endpoint '" + endpoint + "' (expected e.g. tcp://*:7070 or tcp://127.0.0.1:7070)";
    default:
      return endpoint + ": " + e.what();
  }
}

}  // namespace

StatusOr<std::unique_ptr<ServerChannel>> ServerChannel::Bind(zmq::context_t& ctx, const std::string& endpoint,
                                                             const SocketOptions& options) {
  try {
    zmq::socket_t s(ctx, zmq::socket_type::router);
    ApplyCommon(s, options);
    // Report unroutable peers instead of dropping silently, so a vanished client is noticed.
    s.set(zmq::sockopt::router_mandatory, 1);
    s.bind(endpoint);
    return std::unique_ptr<ServerChannel>(new ServerChannel(std::move(s)));
  } catch (const zmq::error_t& e) {
    return Status::IoError(Explain(e, endpoint));
  }
}

std::string ServerChannel::endpoint() const {
  try {
    return socket_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t&) {
    return "";
  }
}

StatusOr<std::optional<ServerChannel::Inbound>> ServerChannel::Recv(std::chrono::milliseconds timeout) {
  try {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::optional<Inbound>();
    Inbound in;
    zmq::message_t id;
    if (!socket_.recv(id, zmq::recv_flags::dontwait)) return std::optional<Inbound>();
    in.peer.assign(static_cast<const char*>(id.data()), id.size());
    // A ROUTER frame is [identity][payload]; a peer sending extra parts is malformed: keep the
    // first payload part and discard the rest so the stream stays aligned.
    if (!id.more()) return std::optional<Inbound>();
    if (!socket_.recv(in.frame, zmq::recv_flags::dontwait)) return std::optional<Inbound>();
    DiscardRemainingParts(socket_, in.frame);
    traffic_.bytes_received += in.frame.size();
    ++traffic_.frames_received;
    return std::optional<Inbound>(std::move(in));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return std::optional<Inbound>();
    return Status::IoError(std::string("receive failed: ") + e.what());
  }
}

StatusOr<bool> ServerChannel::Send(const std::string& peer, const SharedFrame& frame) {
  try {
    zmq::message_t id(peer.data(), peer.size());
    // ROUTER applies the peer's high-water mark to the routing part: if it is taken, the
    // whole message is.
    if (!socket_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return false;
    // Zero copy: the message keeps a reference to the shared frame until ZeroMQ is done.
    auto* keep = new SharedFrame(frame);
    zmq::message_t body(const_cast<uint8_t*>(frame->data()), frame->size(),
                        [](void*, void* hint) { delete static_cast<SharedFrame*>(hint); }, keep);
    socket_.send(body, zmq::send_flags::dontwait);
    traffic_.bytes_sent += frame->size();
    ++traffic_.frames_sent;
    return true;
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return Status::Unavailable("peer is no longer connected");
    return Status::IoError(std::string("send failed: ") + e.what());
  }
}

StatusOr<std::unique_ptr<ClientChannel>> ClientChannel::Connect(zmq::context_t& ctx, const std::string& endpoint,
                                                                const SocketOptions& options) {
  std::unique_ptr<ClientChannel> c(new ClientChannel(ctx, endpoint, options));
  SHOAL_RETURN_IF_ERROR(c->Open());
  return c;
}

Status ClientChannel::Open() {
  try {
    zmq::socket_t s(ctx_, zmq::socket_type::dealer);
    ApplyCommon(s, options_);
    // Reconnect backoff: 100 ms doubling up to 5 s while the aggregator is away.
    s.set(zmq::sockopt::reconnect_ivl, 100);
    s.set(zmq::sockopt::reconnect_ivl_max, 5000);
    // Queue frames only for a completed connection, so nothing piles up for a dead peer.
    s.set(zmq::sockopt::immediate, 1);
    s.connect(endpoint_);
    socket_ = std::move(s);
    return Status::Ok();
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument(Explain(e, endpoint_));
  }
}

Status ClientChannel::Reset() {
  try {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.close();
  } catch (const zmq::error_t&) {
  }
  return Open();
}

StatusOr<std::optional<zmq::message_t>> ClientChannel::Recv(std::chrono::milliseconds timeout) {
  try {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::optional<zmq::message_t>();
    zmq::message_t m;
    if (!socket_.recv(m, zmq::recv_flags::dontwait)) return std::optional<zmq::message_t>();
    DiscardRemainingParts(socket_, m);
    traffic_.bytes_received += m.size();
    ++traffic_.frames_received;
    return std::optional<zmq::message_t>(std::move(m));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return std::optional<zmq::message_t>();
    return Status::IoError(std::string("receive failed: ") + e.what());
  }
}

Status ClientChannel::Send(std::span<const uint8_t> frame, std::chrono::milliseconds timeout) {
  try {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLOUT, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return Status::Unavailable("not connected to " + endpoint_ + " (send timed out)");
    zmq::message_t body(frame.data(), frame.size());
    if (!socket_.send(body, zmq::send_flags::dontwait)) return Status::Unavailable("send queue to " + endpoint_ + " is full");
    traffic_.bytes_sent += frame.size();
    ++traffic_.frames_sent;
    return Status::Ok();
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return Status::Cancelled("interrupted");
    return Status::IoError(std::string("send failed: ") + e.what());
  }
}

}  // namespace shoal::transport
