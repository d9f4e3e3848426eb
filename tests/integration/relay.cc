#include "relay.h"

#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

namespace shoal::testing {
namespace {

// One relayed connection: client side fd, server side fd.
struct Pair {
  int client = -1, server = -1;
  size_t index = 0;  // into recordings_
  bool open() const { return client >= 0 && server >= 0; }
};

}  // namespace

TcpRelay::TcpRelay(int upstream_port) : upstream_port_(upstream_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = LoopbackAddress(0);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 64) != 0)
    throw std::runtime_error("relay: cannot listen");
  socklen_t len = sizeof a;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { Loop(); });
}

TcpRelay::~TcpRelay() {
  stop_ = true;
  thread_.join();
  ::close(listen_fd_);
}

std::string TcpRelay::endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

std::vector<TcpRelay::Recording> TcpRelay::Recordings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recordings_;
}

void TcpRelay::Loop() {
  std::vector<Pair> pairs;
  std::vector<uint8_t> buf(1 << 16);
  auto close_pair = [](Pair& p) {
    if (p.client >= 0) ::close(p.client);
    if (p.server >= 0) ::close(p.server);
    p.client = p.server = -1;
  };
  while (!stop_) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    const bool paused = paused_.load();
    if (!paused)
      for (const Pair& p : pairs) {
        fds.push_back({p.client, POLLIN, 0});
        fds.push_back({p.server, POLLIN, 0});
      }
    if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      const int c = ::accept(listen_fd_, nullptr, nullptr);
      if (c >= 0) {
        const int s = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in up = LoopbackAddress(upstream_port_);
        if (::connect(s, reinterpret_cast<sockaddr*>(&up), sizeof up) != 0) {
          ::close(c);
          ::close(s);
        } else {
          std::lock_guard<std::mutex> lock(mu_);
          pairs.push_back({c, s, recordings_.size()});
          recordings_.emplace_back();
        }
      }
    }
    if (paused) continue;
    for (size_t i = 0; i < pairs.size(); ++i) {
      Pair& p = pairs[i];
      for (int dir = 0; dir < 2 && p.open(); ++dir) {
        const pollfd& f = fds[1 + 2 * i + dir];
        if (!(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const int from = dir == 0 ? p.client : p.server, to = dir == 0 ? p.server : p.client;
        const ssize_t n = ::read(from, buf.data(), buf.size());
        if (n <= 0) {
          close_pair(p);
          break;
        }
        if (dir == 0 && corrupt_.exchange(false)) {
          buf[static_cast<size_t>(n) - 1] ^= 0x01;
          corrupted_ = true;
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto& rec = dir == 0 ? recordings_[p.index].to_server : recordings_[p.index].to_client;
          rec.insert(rec.end(), buf.begin(), buf.begin() + n);
        }
        for (ssize_t done = 0; done < n;) {
          const ssize_t w = ::write(to, buf.data() + done, static_cast<size_t>(n - done));
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) {
            close_pair(p);
            break;
          }
          done += w;
        }
      }
    }
    pairs.erase(std::remove_if(pairs.begin(), pairs.end(), [](const Pair& p) { return !p.open(); }), pairs.end());
  }
  for (Pair& p : pairs) close_pair(p);
}

bool Contains(const std::vector<uint8_t>& haystack, const std::vector<uint8_t>& needle) {
  return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) != haystack.end();
}

}  // namespace shoal::testing
