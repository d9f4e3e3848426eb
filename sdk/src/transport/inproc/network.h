// The in-process implementation of transport/channel.h: a Network of named listeners and the
// channels connected to them, all inside one process, carrying exactly the bytes the ZeroMQ
// channels carry. Runtime unit tests run the real Service and Client over it, and shoal-sim
// runs thousands of virtual clients on it.
//
// Link conditions are injected per connection and per direction (LinkProfile): a one-way
// latency, a bandwidth (frames are serialized through the link one after another, so a big
// frame delays the ones behind it), and a frame-loss probability. Loss decisions come from
// Rng(seed, connection number), so a run with the same seed and the same order of connects
// drops the same frames; delivery times follow the real clock. Disconnects: Cut(peer) breaks
// a connection as a dead TCP link would (frames in flight either way are lost, the
// listener's Send to it says Unavailable, and the channel reconnects under a new routing id
// on its next Send, as a ZeroMQ DEALER does). Destroying a Channel closes its connection as
// closing a socket with linger does: what it already sent still arrives, nothing more reaches
// it.
//
// Differences from ZeroMQ, on purpose: no handshake and no security (everything in one
// process is trusted; `secure()` is false, user ids are empty), no high-water marks (queues
// are unbounded: Listener::Send never answers "full"). A Channel to a name nobody listens on
// waits out its send timeout and says Unavailable, like a DEALER with ZMQ_IMMEDIATE.
//
// Thread-safety: the Network, and different Listeners and Channels, may be used from
// different threads; each Listener or Channel from one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "transport/channel.h"

namespace shoal::transport::inproc {

// One direction of a connection.
struct LinkProfile {
  std::chrono::microseconds latency{0};  // added to every frame. Default: none
  double bytes_per_second = 0.0;         // serialization rate; 0 = unlimited (the default)
  double loss = 0.0;                     // probability that a frame is dropped, in [0, 1). Default: 0
  // While this is set, every frame sent this way is lost, as on a partitioned network: the
  // connection stays open and nothing crosses (the simulator's partitions, flapping links and
  // deaths at an exact point of a round). Frames already on the wire still arrive. Default:
  // none (always up).
  std::shared_ptr<const std::atomic<bool>> down;
};

// Counts over the whole network (for tests and the simulator's report).
struct NetworkStats {
  uint64_t frames_delivered = 0;  // frames handed to a Recv
  uint64_t frames_lost = 0;       // dropped by a LinkProfile's loss, or sent while its link was down
  uint64_t frames_cut = 0;        // discarded because their connection closed
  uint64_t connections = 0;       // opened so far (each Reset and reconnect counts)
};

class Network : public std::enable_shared_from_this<Network> {
 public:
  // `seed` drives every loss decision.
  static std::shared_ptr<Network> Create(uint64_t seed);

  // Listens on `name` (its endpoint reads "inproc-sim://NAME"). IoError while another
  // listener holds the name; the name is free again when that Listener is destroyed.
  StatusOr<std::unique_ptr<Listener>> Listen(const std::string& name);
  // A channel to the listener called `name` (it need not exist yet). `up` applies to frames
  // the channel sends, `down` to frames it receives.
  std::unique_ptr<Channel> Connect(const std::string& name, const LinkProfile& up = {}, const LinkProfile& down = {});

  // Closes the connection with routing id `peer` (as the listener sees it). False when no
  // such connection is open.
  bool Cut(const std::string& peer);

  NetworkStats stats() const;

  // Internal (the implementation's classes share these); not for callers.
  struct Link;
  struct Port;
  std::shared_ptr<Port> FindPort(const std::string& name);
  std::shared_ptr<Link> OpenLink(const std::string& name, const LinkProfile& up, const LinkProfile& down);
  void ClosePort(const std::string& name, const Port* port);
  void Count(uint64_t NetworkStats::*field, uint64_t n = 1);

 private:
  explicit Network(uint64_t seed) : seed_(seed) {}
  const uint64_t seed_;
  mutable std::mutex mu_;
  std::map<std::string, std::weak_ptr<Port>> ports_;
  std::map<std::string, std::weak_ptr<Link>> links_;  // by routing id
  uint64_t next_link_ = 0;
  NetworkStats stats_;
};

}  // namespace shoal::transport::inproc
