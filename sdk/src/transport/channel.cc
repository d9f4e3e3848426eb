#include "transport/channel.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace shoal::transport {

namespace {

// A literal address in 127.0.0.0/8 or ::1 (an IPv4-mapped ::ffff:127.x too).
bool IsLoopbackLiteral(const std::string& host) {
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

// "localhost" counts when every address it resolves to is loopback (it is by RFC 6761, but
// /etc/hosts could say otherwise).
bool LocalhostResolvesToLoopback() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo("localhost", nullptr, &hints, &res) != 0 || !res) return false;
  bool all = true;
  for (addrinfo* a = res; a; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr = a->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                       : a->ai_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr)
                                                  : nullptr;
    if (!addr || !inet_ntop(a->ai_family, addr, text, sizeof text) || !IsLoopbackLiteral(text)) all = false;
  }
  freeaddrinfo(res);
  return all;
}

}  // namespace

bool IsLoopbackEndpoint(const std::string& ep) {
  if (ep.rfind("inproc://", 0) == 0 || ep.rfind("ipc://", 0) == 0) return true;
  if (ep.rfind("tcp://", 0) != 0) return false;
  const std::string rest = ep.substr(6);
  // ZeroMQ's "SOURCE;DESTINATION" form, and interface names, are not judged: not loopback.
  if (rest.find(';') != std::string::npos) return false;
  std::string host;
  if (rest.starts_with("[")) {
    const size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') return false;
    host = rest.substr(1, close - 1);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0) return false;
    host = rest.substr(0, colon);
    if (host.find(':') != std::string::npos) return false;  // an unbracketed IPv6 address
  }
  // The address itself, never a prefix of a name: tcp://127.example.com:1 is a host name.
  if (IsLoopbackLiteral(host)) return true;
  return host == "localhost" && LocalhostResolvesToLoopback();
}

Status HandshakeFailure(const Channel& channel, const std::string& who, const std::string& own_key) {
  const std::string attempts = std::to_string(channel.handshake_failures_in_a_row());
  const std::string& why = channel.last_handshake_failure();
  if (channel.last_failure_was_auth())
    return Status::PermissionDenied(who + " refused this key " + own_key + " (" + why + ", " + attempts +
                                    " attempts): ask its operator to add this machine's .pub file to --allow-keys");
  // Without keys, a CURVE server just closes the connection: the likeliest cause.
  const std::string hint =
      own_key.empty() ? "if it uses CURVE security, pass --secret-key and the server's public key"
      : why.find("mechanisms differ") != std::string::npos
          ? "it does not use CURVE (started without --secret-key?)"
          : "check that the public key given for it (--server-key, or the @KEY of --peers) is really its key";
  return Status::Unavailable("the handshake with " + who + " failed " + attempts + " times: " + why + "; " + hint);
}

}  // namespace shoal::transport
