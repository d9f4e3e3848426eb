// The service's state as others see it: the live status (ServerOptions::on_status) and what a
// checkpoint holds (written by runtime/recorder.h), and the committed rounds read back.
#include "runtime/server/service_impl.h"

namespace shoal::aggregator {

void Service::Impl::PublishStatus(bool now) {
  if (!o_.on_status || (!now && Clock::now() - last_status_ < std::chrono::milliseconds(250))) return;
  last_status_ = Clock::now();
  LiveStatus s;
  s.round = round_.open ? round_.number : last_completed_ + 1;
  s.round_open = round_.open;
  s.clients_registered = clients_.size();
  s.clients_selected = round_.open ? round_.selected.size() : 0;
  s.updates_received = round_.open ? round_.results.size() : 0;
  s.last_completed = last_completed_;
  if (round_.open) s.round_seconds = MillisSince(round_.started) / 1000.0;
  // Synchronous rounds: the selected clients neither reported nor failed yet, sorted for
  // lookups; an asynchronous strategy marks the clients it waits for (`training`).
  std::vector<uint32_t> waiting;
  if (round_.open && !async_)
    for (uint32_t id : round_.selected)
      if (!Settled(id)) waiting.push_back(id);
  std::sort(waiting.begin(), waiting.end());
  s.clients.reserve(clients_.size());
  for (const auto& [id, c] : clients_) {
    const bool selected = async_ ? c.training : std::binary_search(waiting.begin(), waiting.end(), id);
    s.clients.push_back({id, c.name, MillisSince(c.last_seen) / 1000.0, c.bytes_up, c.bytes_down, c.rounds_reported,
                         selected});
  }
  o_.on_status(s);
}

Status Service::Impl::LoadCommittedRounds(const std::string& json) {
  auto bad = [](const std::string& why) { return Status::Corruption("its committed_rounds section " + why); };
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("is not a JSON object");
  std::map<std::string, std::vector<uint64_t>> loaded;
  for (const auto& [name, rounds] : j.items()) {
    if (!rounds.is_array() || rounds.size() > protocol::kMaxCommittedRounds) return bad("has a bad list for " + name);
    std::vector<uint64_t>& out = loaded[name];
    for (const auto& r : rounds) {
      if (!r.is_number_unsigned() || r.get<uint64_t>() == 0 || (!out.empty() && r.get<uint64_t>() <= out.back()))
        return bad("lists rounds for " + name + " that are not positive and increasing");
      out.push_back(r.get<uint64_t>());
    }
  }
  committed_rounds_ = std::move(loaded);
  return Status::Ok();
}

Checkpoint Service::Impl::CheckpointState() const {
  Checkpoint ck;
  ck.round = last_completed_;
  ck.model_spec = task_.model;
  ck.params = global_;
  ck.sections.emplace_back("strategy", strategy_->SaveState());
  // The download codec's error-feedback residual and transform state: without them a lossy
  // --codec-down run would not resume bit-identically.
  const std::vector<uint8_t> down = down_codec_->SaveState();
  ck.sections.emplace_back("codec_down", std::string(down.begin(), down.end()));
  ck.sections.emplace_back("committed_rounds", nlohmann::json(committed_rounds_).dump());
  return ck;
}

}  // namespace shoal::aggregator
