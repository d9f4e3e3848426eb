#include <spdlog/spdlog.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>

#include "core/rate_limited_log.h"
#include "transport/zmq/zmq_channel.h"

#include "transport/zmq/zap.h"

namespace shoal::transport {

namespace {

using Clock = std::chrono::steady_clock;

void SetKey(zmq::socket_t& s, int option, std::span<const uint8_t> key) {
  if (zmq_setsockopt(s.handle(), option, key.data(), key.size()) != 0) throw zmq::error_t();
}

void ApplyCommon(zmq::socket_t& s, const SocketOptions& o) {
  s.set(zmq::sockopt::maxmsgsize, o.max_frame_bytes);
  s.set(zmq::sockopt::sndhwm, o.send_hwm);
  s.set(zmq::sockopt::rcvhwm, o.recv_hwm);
  s.set(zmq::sockopt::linger, o.linger_ms);
  s.set(zmq::sockopt::handshake_ivl, o.handshake_ms);
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

// A received ZeroMQ message as a transport Message (the view keeps the message alive).
Message Wrap(std::shared_ptr<zmq::message_t> m) {
  std::span<const uint8_t> bytes(static_cast<const uint8_t*>(m->data()), m->size());
  return Message(bytes, std::move(m));
}

std::string Explain(const zmq::error_t& e, const std::string& endpoint) {
  switch (e.num()) {
    case EADDRINUSE:
      return "address " + endpoint + " is already in use (another Shoal process running?); pick another port with --listen";
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

StatusOr<std::unique_ptr<ZmqListener>> ZmqListener::Bind(zmq::context_t& ctx, const std::string& endpoint,
                                                             const SocketOptions& options) {
  try {
    zmq::socket_t s(ctx, zmq::socket_type::router);
    ApplyCommon(s, options);
    // Report unroutable peers instead of dropping silently, so a vanished client is noticed.
    s.set(zmq::sockopt::router_mandatory, 1);
    if (options.curve) {
      s.set(zmq::sockopt::curve_server, 1);
      SetKey(s, ZMQ_CURVE_SECRETKEY, options.curve->curve_secret);
      s.set(zmq::sockopt::zap_domain, kZapDomain);
    }
    SHOAL_ASSIGN_OR_RETURN(auto monitor, SocketMonitor::Attach(ctx, s));
    try {
      s.bind(endpoint);
    } catch (const zmq::error_t&) {
      monitor.reset();  // before the socket closes
      throw;
    }
    return std::unique_ptr<ZmqListener>(new ZmqListener(std::move(s), std::move(monitor), options.curve != nullptr));
  } catch (const zmq::error_t& e) {
    return Status::IoError(Explain(e, endpoint));
  }
}

std::string ZmqListener::endpoint() const {
  try {
    return socket_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t&) {
    return "";
  }
}

void ZmqListener::DrainMonitor() {
  const std::vector<MonitorEvent> events = monitor_->Drain();  // already counted in stats()
  // Each failure's own number: the count before this batch, then one per failure in it.
  uint64_t n = monitor_->stats().failed();
  for (const MonitorEvent& e : events) n -= e.IsHandshakeFailure();
  for (const MonitorEvent& e : events) {
    if (!e.IsHandshakeFailure()) continue;
    ++n;
    // Refused keys are logged by the ZAP handler, with the key.
    if (e.event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) continue;
    // The first few in full, then every 1000th: a scanner cannot fill the disk.
    if (ShouldLogOccurrence(n)) spdlog::warn("handshake #{} failed on {}: {}", n, e.address, e.Describe());
  }
}

StatusOr<std::optional<ZmqListener::Inbound>> ZmqListener::Recv(std::chrono::milliseconds timeout) {
  try {
    zmq::pollitem_t items[2] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                {monitor_->events_socket().handle(), 0, ZMQ_POLLIN, 0}};
    if (zmq::poll(items, 2, timeout) == 0) return std::optional<Inbound>();
    if (items[1].revents & ZMQ_POLLIN) DrainMonitor();
    if (!(items[0].revents & ZMQ_POLLIN)) return std::optional<Inbound>();
    Inbound in;
    zmq::message_t id;
    if (!socket_.recv(id, zmq::recv_flags::dontwait)) return std::optional<Inbound>();
    in.peer.assign(static_cast<const char*>(id.data()), id.size());
    // A ROUTER frame is [identity][payload]; a peer sending extra parts is malformed: keep the
    // first payload part and discard the rest so the stream stays aligned.
    if (!id.more()) return std::optional<Inbound>();
    auto body = std::make_shared<zmq::message_t>();
    if (!socket_.recv(*body, zmq::recv_flags::dontwait)) return std::optional<Inbound>();
    DiscardRemainingParts(socket_, *body);
    // Set by ZeroMQ from the ZAP reply for this connection; a peer cannot choose it.
    if (const char* user = zmq_msg_gets(body->handle(), "User-Id")) in.user_id = user;
    in.frame = Wrap(std::move(body));
    traffic_.bytes_received += in.frame.size();
    ++traffic_.frames_received;
    return std::optional<Inbound>(std::move(in));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return std::optional<Inbound>();
    return Status::IoError(std::string("receive failed: ") + e.what());
  }
}

StatusOr<bool> ZmqListener::Send(const std::string& peer, const SharedFrame& frame) {
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

StatusOr<std::unique_ptr<ZmqChannel>> ZmqChannel::Connect(zmq::context_t& ctx, const std::string& endpoint,
                                                                const SocketOptions& options) {
  std::unique_ptr<ZmqChannel> c(new ZmqChannel(ctx, endpoint, options));
  SHOAL_RETURN_IF_ERROR(c->Open());
  return c;
}

Status ZmqChannel::Open() {
  reopen_at_.reset();
  try {
    zmq::socket_t s(ctx_, zmq::socket_type::dealer);
    ApplyCommon(s, options_);
    // Reconnect backoff: 100 ms doubling up to 5 s while the aggregator is away.
    s.set(zmq::sockopt::reconnect_ivl, 100);
    s.set(zmq::sockopt::reconnect_ivl_max, 5000);
    // Queue frames only for a completed connection, so nothing piles up for a dead peer.
    s.set(zmq::sockopt::immediate, 1);
    if (options_.curve) {
      SetKey(s, ZMQ_CURVE_SERVERKEY, options_.server_key);
      SetKey(s, ZMQ_CURVE_PUBLICKEY, options_.curve->curve_public);
      SetKey(s, ZMQ_CURVE_SECRETKEY, options_.curve->curve_secret);
    }
    SHOAL_ASSIGN_OR_RETURN(auto monitor, SocketMonitor::Attach(ctx_, s));
    try {
      s.connect(endpoint_);
    } catch (const zmq::error_t&) {
      monitor.reset();  // before the socket closes
      throw;
    }
    socket_ = std::move(s);
    monitor_ = std::move(monitor);
    return Status::Ok();
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument(Explain(e, endpoint_));
  }
}

void ZmqChannel::Close() {
  monitor_.reset();  // before the socket closes
  try {
    if (socket_.handle() != nullptr) {
      socket_.set(zmq::sockopt::linger, 0);
      socket_.close();
    }
  } catch (const zmq::error_t&) {
  }
}

ZmqChannel::~ZmqChannel() { Close(); }

Status ZmqChannel::Reset() {
  Close();
  return Open();
}

void ZmqChannel::WatchHandshakes() {
  if (monitor_) {
    for (const MonitorEvent& e : monitor_->Drain()) {
      CountEvent(totals_, e);
      if (e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        failures_in_a_row_ = 0;
        last_failure_auth_ = false;
        reopen_at_.reset();
      } else if (e.event == ZMQ_EVENT_CONNECTED) {
        attempt_failed_ = false;  // a new attempt (ZeroMQ retries by itself after some failures)
        reopen_at_.reset();
      } else if (e.IsHandshakeFailure()) {
        // One attempt can report twice (the specific error, then the closed connection):
        // count it once, and keep the specific reason.
        const bool vague = e.event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
        if (!attempt_failed_) ++failures_in_a_row_;
        if (!attempt_failed_ || !vague) {
          last_failure_auth_ = e.event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
          last_failure_ = e.Describe();
        }
        attempt_failed_ = true;
        spdlog::debug("handshake with {} failed: {}", endpoint_, e.Describe());
        // After a refused key or a protocol error ZeroMQ does not reconnect: reopen after
        // 250 ms, doubling up to 5 s, unless it does.
        const int64_t backoff_ms = std::min<int64_t>(int64_t{250} << std::min<uint64_t>(failures_in_a_row_ - 1, 5), 5000);
        reopen_at_ = Clock::now() + std::chrono::milliseconds(backoff_ms);
      }
    }
  }
  if (reopen_at_ && Clock::now() >= *reopen_at_) {
    Status st = Reset();
    if (!st.ok()) spdlog::warn("cannot reopen the connection to {}: {}", endpoint_, st.message());
  }
}

StatusOr<std::optional<Message>> ZmqChannel::Recv(std::chrono::milliseconds timeout) {
  try {
    WatchHandshakes();
    if (!monitor_) return Status::IoError("the connection to " + endpoint_ + " could not be reopened");
    zmq::pollitem_t items[2] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                {monitor_->events_socket().handle(), 0, ZMQ_POLLIN, 0}};
    if (zmq::poll(items, 2, timeout) == 0) return std::optional<Message>();
    if (items[1].revents & ZMQ_POLLIN) WatchHandshakes();
    if (!(items[0].revents & ZMQ_POLLIN)) return std::optional<Message>();
    auto m = std::make_shared<zmq::message_t>();
    if (!socket_.recv(*m, zmq::recv_flags::dontwait)) return std::optional<Message>();
    DiscardRemainingParts(socket_, *m);
    traffic_.bytes_received += m->size();
    ++traffic_.frames_received;
    return std::optional<Message>(Wrap(std::move(m)));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return std::optional<Message>();
    return Status::IoError(std::string("receive failed: ") + e.what());
  }
}

Status ZmqChannel::Send(std::span<const uint8_t> frame, std::chrono::milliseconds timeout) {
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
