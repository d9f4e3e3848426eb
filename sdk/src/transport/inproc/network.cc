#include "transport/inproc/network.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <optional>
#include <queue>
#include <thread>
#include <vector>

#include "core/rng.h"

namespace shoal::transport::inproc {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr const char* kScheme = "inproc-sim://";

struct Pending {
  Clock::time_point at;  // when the frame arrives
  uint64_t seq = 0;      // ties keep sending order
  std::string peer;      // routing id of the connection it travelled on
  SharedFrame frame;
  std::shared_ptr<const std::atomic<bool>> cut;  // set when that connection was cut: the frame is lost
  bool operator>(const Pending& o) const { return std::tie(at, seq) > std::tie(o.at, o.seq); }
};

// Frames in flight towards one receiver, handed out in arrival-time order once they arrive.
class TimedQueue {
 public:
  void Push(Pending p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      p.seq = next_seq_++;
      q_.push(std::move(p));
    }
    cv_.notify_all();
  }
  // The first frame that has arrived, waiting up to `timeout`.
  std::optional<Pending> Pop(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      const auto now = Clock::now();
      if (!q_.empty() && q_.top().at <= now) {
        Pending p = q_.top();
        q_.pop();
        return p;
      }
      if (now >= deadline) return std::nullopt;
      const auto until = q_.empty() ? deadline : std::min(deadline, q_.top().at);
      cv_.wait_until(lock, until);
    }
  }
  size_t Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t n = q_.size();
    q_ = {};
    return n;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> q_;
  uint64_t next_seq_ = 0;
};

// One direction of a link: when a frame of `bytes` sent now arrives, or nullopt if lost.
struct Direction {
  LinkProfile profile;
  Rng rng;
  Clock::time_point busy_until{};  // the link is serializing earlier frames until then
  Direction(const LinkProfile& p, uint64_t seed, uint64_t stream) : profile(p), rng(seed, stream) {}
  std::optional<Clock::time_point> Schedule(size_t bytes) {
    if (profile.down && profile.down->load()) return std::nullopt;
    if (profile.loss > 0.0 && rng.UniformDouble() < profile.loss) return std::nullopt;
    const auto start = std::max(Clock::now(), busy_until);
    auto done = start;
    if (profile.bytes_per_second > 0.0)
      done += std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(static_cast<double>(bytes) / profile.bytes_per_second));
    busy_until = done;
    return done + profile.latency;
  }
};

}  // namespace

struct Network::Link {
  Link(std::string id_, const LinkProfile& up_, const LinkProfile& down_, uint64_t seed, uint64_t number)
      : id(std::move(id_)), up(up_, seed, 2 * number), down(down_, seed, 2 * number + 1) {}
  const std::string id;
  std::mutex mu;  // guards up and down
  Direction up, down;
  TimedQueue to_channel;
  std::atomic<bool> open{true};  // false once closed or cut: nothing more is sent either way
  std::shared_ptr<std::atomic<bool>> cut = std::make_shared<std::atomic<bool>>(false);  // frames in flight are lost
};

struct Network::Port {
  explicit Port(std::string n) : name(std::move(n)) {}
  const std::string name;
  TimedQueue inbox;
  std::mutex mu;  // guards links and handshakes
  std::map<std::string, std::weak_ptr<Link>> links;  // connections that have sent here
  HandshakeStats handshakes;  // a connection counts when its first frame arrives
};

namespace {

class InprocListener final : public Listener {
 public:
  InprocListener(std::shared_ptr<Network> net, std::shared_ptr<Network::Port> port)
      : net_(std::move(net)), port_(std::move(port)), endpoint_(kScheme + port_->name) {}
  ~InprocListener() override { net_->ClosePort(port_->name, port_.get()); }

  StatusOr<std::optional<Inbound>> Recv(milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      auto p = port_->inbox.Pop(std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - Clock::now())));
      if (!p) return std::optional<Inbound>();
      if (p->cut && p->cut->load()) {  // its connection was cut while the frame was in flight
        net_->Count(&NetworkStats::frames_cut);
        continue;
      }
      traffic_.bytes_received += p->frame->size();
      ++traffic_.frames_received;
      net_->Count(&NetworkStats::frames_delivered);
      Inbound in;
      in.peer = std::move(p->peer);
      in.frame = Message(std::span<const uint8_t>(p->frame->data(), p->frame->size()), p->frame);
      return std::optional<Inbound>(std::move(in));
    }
  }

  StatusOr<bool> Send(const std::string& peer, const SharedFrame& frame) override {
    std::shared_ptr<Network::Link> link;
    {
      std::lock_guard<std::mutex> lock(port_->mu);
      if (auto it = port_->links.find(peer); it != port_->links.end()) link = it->second.lock();
    }
    if (!link || !link->open) {
      std::lock_guard<std::mutex> lock(port_->mu);
      if (port_->links.erase(peer)) ++port_->handshakes.disconnected;
      return Status::Unavailable("peer is no longer connected");
    }
    std::optional<Clock::time_point> at;
    {
      std::lock_guard<std::mutex> lock(link->mu);
      at = link->down.Schedule(frame->size());
    }
    traffic_.bytes_sent += frame->size();
    ++traffic_.frames_sent;
    if (!at) {
      net_->Count(&NetworkStats::frames_lost);
      return true;  // gone on the wire, as far as the sender can tell
    }
    link->to_channel.Push({*at, 0, peer, frame, nullptr});
    return true;
  }

  const Traffic& traffic() const override { return traffic_; }
  std::string endpoint() const override { return endpoint_; }
  const HandshakeStats& handshakes() const override {
    std::lock_guard<std::mutex> lock(port_->mu);
    handshakes_ = port_->handshakes;
    return handshakes_;
  }
  bool secure() const override { return false; }

 private:
  std::shared_ptr<Network> net_;
  std::shared_ptr<Network::Port> port_;
  std::string endpoint_;
  Traffic traffic_;
  mutable HandshakeStats handshakes_;  // the port's, as of the last handshakes() call
};

class InprocChannel final : public Channel {
 public:
  InprocChannel(std::shared_ptr<Network> net, std::string name, const LinkProfile& up, const LinkProfile& down)
      : net_(std::move(net)), name_(std::move(name)), endpoint_(kScheme + name_), up_(up), down_(down) {
    Open();
  }
  ~InprocChannel() override { Close(); }

  StatusOr<std::optional<Message>> Recv(milliseconds timeout) override {
    auto p = link_->to_channel.Pop(timeout);
    if (!p) return std::optional<Message>();
    traffic_.bytes_received += p->frame->size();
    ++traffic_.frames_received;
    net_->Count(&NetworkStats::frames_delivered);
    return std::optional<Message>(Message(std::span<const uint8_t>(p->frame->data(), p->frame->size()), p->frame));
  }

  Status Send(std::span<const uint8_t> frame, milliseconds timeout) override {
    if (!link_->open) {  // cut: reconnect under a new routing id, as a DEALER does
      Close();
      Open();
    }
    const auto deadline = Clock::now() + timeout;
    std::shared_ptr<Network::Port> port;
    while (!(port = net_->FindPort(name_))) {
      if (Clock::now() >= deadline) return Status::Unavailable("not connected to " + endpoint_ + " (send timed out)");
      std::this_thread::sleep_for(std::min(milliseconds(1), timeout));
    }
    {
      std::lock_guard<std::mutex> lock(port->mu);
      if (port->links.emplace(link_->id, link_).second) {
        ++port->handshakes.connections;
        ++port->handshakes.succeeded;
      }
    }
    auto shared = std::make_shared<const std::vector<uint8_t>>(frame.begin(), frame.end());
    std::optional<Clock::time_point> at;
    {
      std::lock_guard<std::mutex> lock(link_->mu);
      at = link_->up.Schedule(frame.size());
    }
    traffic_.bytes_sent += frame.size();
    ++traffic_.frames_sent;
    if (!at) {
      net_->Count(&NetworkStats::frames_lost);
      return Status::Ok();
    }
    port->inbox.Push({*at, 0, link_->id, std::move(shared), link_->cut});
    return Status::Ok();
  }

  Status Reset() override {
    Close();
    Open();
    return Status::Ok();
  }
  const Traffic& traffic() const override { return traffic_; }
  const std::string& endpoint() const override { return endpoint_; }
  uint64_t handshake_failures_in_a_row() const override { return 0; }
  bool last_failure_was_auth() const override { return false; }
  const std::string& last_handshake_failure() const override { return no_failure_; }
  const HandshakeStats& handshakes() const override { return handshakes_; }

 private:
  void Open() {
    link_ = net_->OpenLink(name_, up_, down_);
    ++handshakes_.connections;
    ++handshakes_.succeeded;
  }
  void Close() {
    if (!link_) return;
    link_->open = false;
    net_->Count(&NetworkStats::frames_cut, link_->to_channel.Clear());
    ++handshakes_.disconnected;
  }

  std::shared_ptr<Network> net_;
  const std::string name_;
  const std::string endpoint_;
  const LinkProfile up_, down_;
  std::shared_ptr<Network::Link> link_;
  Traffic traffic_;
  HandshakeStats handshakes_;
  const std::string no_failure_;
};

}  // namespace

std::shared_ptr<Network> Network::Create(uint64_t seed) { return std::shared_ptr<Network>(new Network(seed)); }

StatusOr<std::unique_ptr<Listener>> Network::Listen(const std::string& name) {
  auto port = std::make_shared<Port>(name);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = ports_[name];
    if (slot.lock()) return Status::IoError("address " + std::string(kScheme) + name + " is already in use");
    slot = port;
  }
  return std::unique_ptr<Listener>(new InprocListener(shared_from_this(), std::move(port)));
}

std::unique_ptr<Channel> Network::Connect(const std::string& name, const LinkProfile& up, const LinkProfile& down) {
  return std::unique_ptr<Channel>(new InprocChannel(shared_from_this(), name, up, down));
}

std::shared_ptr<Network::Port> Network::FindPort(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ports_.find(name);
  return it == ports_.end() ? nullptr : it->second.lock();
}

std::shared_ptr<Network::Link> Network::OpenLink(const std::string& name, const LinkProfile& up,
                                                 const LinkProfile& down) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t number = next_link_++;
  auto link = std::make_shared<Link>(name + "#" + std::to_string(number), up, down, seed_, number);
  links_[link->id] = link;
  ++stats_.connections;
  // Forget closed links now and then so the map stays the size of the open ones.
  if ((number & 1023) == 1023)
    std::erase_if(links_, [](const auto& kv) {
      auto l = kv.second.lock();
      return !l || !l->open;
    });
  return link;
}

void Network::ClosePort(const std::string& name, const Port* port) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ports_.find(name);
  if (it != ports_.end() && (it->second.expired() || it->second.lock().get() == port)) ports_.erase(it);
}

bool Network::Cut(const std::string& peer) {
  std::shared_ptr<Link> link;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = links_.find(peer);
    if (it != links_.end()) link = it->second.lock();
  }
  if (!link || !link->open) return false;
  link->open = false;
  *link->cut = true;
  Count(&NetworkStats::frames_cut, link->to_channel.Clear());
  return true;
}

NetworkStats Network::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Network::Count(uint64_t NetworkStats::*field, uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.*field += n;
}

}  // namespace shoal::transport::inproc
