#include "transport/zmq/zap.h"

#include <spdlog/spdlog.h>

#include <array>
#include <cstring>
#include <vector>

#include "core/rate_limited_log.h"

namespace shoal::transport {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kZapVersion = "1.0";

}  // namespace

StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Start(zmq::context_t& ctx,
                                                        std::shared_ptr<const crypto::AllowList> keys) {
  std::unique_ptr<ZapHandler> h(new ZapHandler(std::move(keys)));
  try {
    zmq::socket_t s(ctx, zmq::socket_type::rep);
    s.set(zmq::sockopt::linger, 0);
    s.bind(kZapEndpoint);  // bound here, before Start returns: no handshake can slip past it
    h->thread_ = std::thread([raw = h.get(), sock = std::move(s)]() mutable { raw->Loop(std::move(sock)); });
  } catch (const zmq::error_t& e) {
    if (e.num() == EADDRINUSE) return Status::Internal("a ZAP handler already runs in this ZeroMQ context");
    return Status::Internal(std::string("cannot start the ZAP handler: ") + e.what());
  }
  return h;
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::Replace(std::shared_ptr<const crypto::AllowList> keys) {
  std::lock_guard<std::mutex> lock(mu_);
  keys_ = std::move(keys);
}

std::shared_ptr<const crypto::AllowList> ZapHandler::allow_list() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_;
}

void ZapHandler::Loop(zmq::socket_t socket) {
  while (!stop_.load()) {
    try {
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      Serve(socket);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      if (e.num() == EINTR) continue;
      spdlog::error("ZAP handler: {}", e.what());
    }
  }
}

// One request: [version, request id, domain, address, routing id, mechanism, credentials...].
// One reply: [version, request id, status code, status text, user id, metadata].
void ZapHandler::Serve(zmq::socket_t& socket) {
  std::vector<zmq::message_t> parts;
  for (bool more = true; more;) {
    zmq::message_t m;
    if (!socket.recv(m, zmq::recv_flags::dontwait)) break;
    more = m.more();
    if (parts.size() < 16) parts.push_back(std::move(m));  // read every part, keep a bounded few
  }
  if (parts.empty()) return;
  // A REP socket must answer before it can read again; an unusable request gets a 500.
  std::string status = "500", text = "malformed ZAP request", user_id;
  std::string request_id = parts.size() > 1 ? parts[1].to_string() : "";
  std::string peer = parts.size() > 3 ? parts[3].to_string() : "?";
  std::string key_z85;
  if (parts.size() >= 6 && parts[0].to_string_view() == kZapVersion) {
    const std::string_view domain = parts[2].to_string_view(), mechanism = parts[5].to_string_view();
    if (domain != kZapDomain) {
      status = "400";
      text = "unknown ZAP domain";
    } else if (mechanism != "CURVE" || parts.size() != 7 || parts[6].size() != crypto::kCurveKeyBytes) {
      status = "400";
      text = "only CURVE is accepted";
    } else {
      std::array<uint8_t, crypto::kCurveKeyBytes> key{};
      std::memcpy(key.data(), parts[6].data(), key.size());
      key_z85 = crypto::Z85Key(key);
      if (allow_list()->Contains(key_z85)) {
        status = "200";
        text = "OK";
        user_id = key_z85;
      } else {
        status = "400";
        text = "key not on the allow-list";
      }
    }
  }
  if (status == "200") {
    ++allowed_;
  } else {
    const uint64_t n = ++refused_;
    // The first few in full, then every 1000th: a scanner cannot fill the disk.
    if (ShouldLogOccurrence(n))
      spdlog::warn("refused handshake #{} from {}: {}{}", n, peer, text, key_z85.empty() ? "" : " (key " + key_z85 + ")");
  }
  socket.send(zmq::buffer(std::string_view(kZapVersion)), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(status), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(text), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(user_id), zmq::send_flags::sndmore);
  socket.send(zmq::message_t(), zmq::send_flags::none);
}

}  // namespace shoal::transport
