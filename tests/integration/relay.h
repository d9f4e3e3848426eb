// A TCP relay for integration tests: listens on 127.0.0.1, forwards every accepted connection
// to an upstream port, and records every byte in both directions, so a test can inspect what
// actually crossed the wire (plaintext or not) and replay it later. Forwarding can be paused,
// and one bit of what a client sends can be flipped in transit.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shoal::testing {

class TcpRelay {
 public:
  explicit TcpRelay(int upstream_port);
  ~TcpRelay();
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  int port() const { return port_; }
  std::string endpoint() const;

  struct Recording {
    std::vector<uint8_t> to_server;  // bytes the client sent
    std::vector<uint8_t> to_client;  // bytes the server sent
  };
  // One recording per accepted connection, in accept order.
  std::vector<Recording> Recordings() const;

  // While paused nothing is read or forwarded (bytes wait in the kernel's buffers).
  void Pause() { paused_ = true; }
  void Resume() { paused_ = false; }
  // Flips one bit in the next bytes read from a client (the last byte of that read, which on
  // an encrypted link lies inside a frame's ciphertext or its MAC), as an attacker on the path
  // could; then forwards unchanged again.
  void CorruptNextToServer() { corrupt_ = true; }
  bool corrupted() const { return corrupted_; }  // the flip happened

 private:
  void Loop();

  int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false}, paused_{false}, corrupt_{false}, corrupted_{false};
  mutable std::mutex mu_;
  std::vector<Recording> recordings_;  // guarded by mu_
  std::thread thread_;
};

// Whether `needle` occurs in `haystack`.
bool Contains(const std::vector<uint8_t>& haystack, const std::vector<uint8_t>& needle);

}  // namespace shoal::testing
