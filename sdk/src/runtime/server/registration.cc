#include "runtime/server/service_impl.h"

namespace shoal::aggregator {

protocol::WelcomeInfo Service::Impl::MakeWelcome(uint32_t id) const {
  protocol::WelcomeInfo w;
  w.client_id = id;
  w.task = task_;
  w.heartbeat_interval_ms = o_.heartbeat_interval_ms;
  w.heartbeat_timeout_ms = o_.heartbeat_timeout_ms;
  w.chunk_bytes = o_.chunk_bytes;
  w.max_frame_bytes = static_cast<uint32_t>(max_frame_bytes_);
  w.privacy = privacy_;
  if (!o_.checkpoint_dir.empty() && !edge_) {
    auto it = committed_rounds_.find(clients_.at(id).name);
    w.committed_rounds = it == committed_rounds_.end() ? std::vector<uint64_t>{} : it->second;
  }
  return w;
}

void Service::Impl::HandleHello(const transport::Listener::Inbound& in, const protocol::Header& header,
                                const protocol::Hello& hello) {
  const std::string& peer = in.peer;
  const std::string& name = hello.client_name;
  if (!protocol::ValidName(name))
    return Reject(peer, ErrorCode::MalformedFrame, "Hello needs a client name of 1-64 printable characters");
  // A Hello repeated on the same connection (the client retries while the Welcome is in
  // flight) gets the same registration again: ids must not change under the client.
  if (auto it = by_peer_.find(peer); it != by_peer_.end()) {
    ClientState& c = clients_.at(it->second);
    if (c.name == name) {
      c.last_seen = Clock::now();
      c.last_sequence = std::max(c.last_sequence, header.sequence);
      Enqueue(c.id, protocol::EncodeWelcome(Header(0), MakeWelcome(c.id)));
      return;
    }
    DropClient(it->second, "re-registered under another name");
  }
  // With CURVE a name belongs, for this session, to the key that first used it (while that key
  // stays allowed): a listed client cannot take over another's name, and with it its place in
  // the canonical order and its metrics.
  // (A revoked owner frees the name.)
  if (auto owner = name_keys_.find(name);
      allow_list_ && owner != name_keys_.end() && owner->second != in.user_id && KeyAllowed(owner->second))
    return Reject(peer, ErrorCode::Refused, "client name '" + name + "' belongs to another key; use --name to pick another");
  // A known name on a new connection is the same client, reconnected (its link was cut) or
  // restarted. The same key proves it: the registration moves to the new connection (below).
  // Without keys, a holder heard from recently means two clients share a name, and the
  // newcomer must wait (it retries) or pick another --name; a silent holder is replaced.
  std::optional<uint32_t> moved;
  if (auto holder = by_name_.find(name); holder != by_name_.end()) {
    const ClientState& c = clients_.at(holder->second);
    const bool same_key = allow_list_ && c.identity == in.user_id;
    if (!same_key && MillisSince(c.last_seen) <= 2 * static_cast<int64_t>(o_.heartbeat_interval_ms))
      return Reject(peer, ErrorCode::Duplicate,
                    "client name '" + name + "' is in use by a live client; retrying (use --name to pick another)");
    // Secure aggregation's round state is bound to the connection's keys exchange: a client
    // that lost its link mid-round drops out of it (the others recover its share).
    if (same_key && !round_.secagg)
      moved = holder->second;
    else
      DropClient(holder->second, "reconnected");
  }
  if (!moved && clients_.size() >= o_.max_clients)
    return Reject(peer, ErrorCode::Refused, "the aggregator is full (" + std::to_string(o_.max_clients) + " clients)");
  // Negotiation: the client lists the codec stages it can run; every stage of the task's
  // codecs must be among them.
  const std::vector<std::string>& supported = hello.codecs;
  for (const std::string& stage : required_stages_)
    if (std::find(supported.begin(), supported.end(), stage) == supported.end())
      return Reject(peer, ErrorCode::UnsupportedCodec,
                    "client '" + name + "' cannot run codec stage '" + stage + "' of this task (codec '" + task_.codec +
                        "', codec-down '" + task_.codec_down + "'" +
                        (task_.codec_slow.empty() ? "" : ", codec-slow '" + task_.codec_slow + "'") +
                        "); upgrade the client or choose another codec");

  // A task that standardizes its features needs a trainer that applies the map.
  if (!task_.feature_mean.empty() &&
      std::find(hello.features.begin(), hello.features.end(), "standardize") == hello.features.end())
    return Reject(peer, ErrorCode::Refused,
                  "client '" + name + "' (trainer " + (hello.trainer.empty() ? "?" : hello.trainer) +
                      ") does not apply the task's feature standardization; start the aggregator with "
                      "--standardize off, or use a trainer that standardizes");

  if (moved) return MoveClient(*moved, in, header, hello);
  ClientState c;
  c.id = next_client_id_++;
  c.peer = peer;
  c.identity = in.user_id;
  c.name = name;
  c.num_examples = hello.num_examples;
  c.last_sequence = header.sequence;
  c.last_seen = Clock::now();
  spdlog::info("client {} registered as id {} ({} examples, trainer {}{})", name, c.id, c.num_examples,
               hello.trainer.empty() ? "?" : hello.trainer, c.identity.empty() ? "" : ", key " + c.identity);
  const uint32_t id = c.id;
  if (allow_list_) name_keys_[name] = c.identity;
  by_peer_[peer] = id;
  by_name_[name] = id;
  clients_[id] = std::move(c);
  Enqueue(id, protocol::EncodeWelcome(Header(0), MakeWelcome(id)));
  waiting_logged_ = false;
  dispatch_pending_ = true;
}

void Service::Impl::MoveClient(uint32_t id, const transport::Listener::Inbound& in, const protocol::Header& header,
                              const protocol::Hello& hello) {
  ClientState& c = clients_.at(id);
  by_peer_.erase(c.peer);
  c.peer = in.peer;
  by_peer_[in.peer] = id;
  c.num_examples = hello.num_examples;
  c.last_sequence = header.sequence;
  c.last_seen = Clock::now();
  c.replica_hash.clear();  // a restarted process has no replica: its next task carries the full model
  ++clients_moved_;
  spdlog::info("client {} (id {}) is back on a new connection; its registration moved there", c.name, id);
  Enqueue(id, protocol::EncodeWelcome(Header(0), MakeWelcome(id)));
  // What came in on the old connection of an update in flight is dropped; the task goes out
  // again, so a client that lost it (or restarted) still answers this round.
  if (async_) {
    if (c.training) {
      c.training = false;
      dispatch_pending_ = true;
    }
  } else if (round_.open && IsSelected(id) && !Settled(id)) {
    SendTask(c, /*force_full=*/true);
  }
  round_.assembling.erase(id);
  round_.incoming.erase(id);
}

void Service::Impl::FailClient(uint32_t id, const std::string& reason) {
  // After the Bye there is no round to fail (an asynchronous strategy's clients leave mid-task).
  if (closing_ || !IsSelected(id) || (!async_ && Settled(id))) return;
  round_.assembling.erase(id);
  round_.incoming.erase(id);
  auto it = clients_.find(id);
  if (it != clients_.end() && async_) {  // idle now; a task again once there is a model it has not trained on
    it->second.training = false;
    dispatch_pending_ = true;
  }
  round_.failures.emplace(id, ClientFailure{it != clients_.end() ? it->second.name : "?", id, reason});
  spdlog::warn("round {}: client {} failed: {}", round_.number, id, reason);
}

void Service::Impl::DropClient(uint32_t id, const std::string& reason) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  FailClient(id, reason);
  by_peer_.erase(it->second.peer);
  by_name_.erase(it->second.name);
  clients_.erase(it);
  outbox_.erase(id);
}

void Service::Impl::ExpireClients() {
  // A scan of every client, so at most every 50 ms: heartbeat timeouts are seconds.
  if (MillisSince(last_expiry_scan_) < 50) return;
  last_expiry_scan_ = Clock::now();
  std::vector<uint32_t> expired;
  for (const auto& [id, c] : clients_)
    if (MillisSince(c.last_seen) > o_.heartbeat_timeout_ms) expired.push_back(id);
  for (uint32_t id : expired) {
    spdlog::warn("client {} ({}) silent for over {} ms; dropped", id, clients_[id].name, o_.heartbeat_timeout_ms);
    DropClient(id, "disconnected (heartbeat timeout)");
  }
}

}  // namespace shoal::aggregator
