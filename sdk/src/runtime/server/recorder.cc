#include "runtime/server/service_impl.h"

namespace shoal::aggregator {

Status TrimMetrics(const std::string& path, uint64_t last_round) {
  std::ifstream in(path);
  if (!in) return Status::Ok();
  std::string kept, line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("round") && j["round"].is_number_unsigned() &&
        j["round"].get<uint64_t>() <= last_round)
      kept += line + '\n';
  }
  in.close();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    if (!out) return Status::IoError("cannot rewrite --metrics-out " + path);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IoError("cannot rewrite --metrics-out " + path + ": " + ec.message());
  return Status::Ok();
}

void Service::Impl::PrintTableRow(const RoundReport& r) {
  if (r.round == 1 || r.round % 20 == 1 || !table_header_printed_)
    std::printf("%6s %9s %9s %12s %12s %9s %5s\n", "round", "accuracy", "loss", "bytes_up", "bytes_down", "ms", "ok");
  table_header_printed_ = true;
  char accuracy[32] = "-", loss[32] = "-";  // an edge does not evaluate (its root does)
  if (!edge_) {
    std::snprintf(accuracy, sizeof accuracy, "%.4f", r.test_accuracy);
    std::snprintf(loss, sizeof loss, "%.4f", r.test_loss);
  }
  std::printf("%6llu %9s %9s %12llu %12llu %9.1f %2zu/%zu\n", static_cast<unsigned long long>(r.round), accuracy, loss,
              static_cast<unsigned long long>(r.bytes_up),
              static_cast<unsigned long long>(r.bytes_down), r.seconds * 1000.0, r.clients_reported, r.clients_selected);
  std::fflush(stdout);
}

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

Status Service::Impl::WriteMetrics(const nlohmann::json& line) {
  if (!metrics_.is_open()) return Status::Ok();
  metrics_ << line.dump() << '\n';
  metrics_.flush();
  if (!metrics_) return Status::IoError("writing --metrics-out " + o_.metrics_out + " failed");
  return Status::Ok();
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

Status Service::Impl::SaveCheckpoint() {
  if (o_.checkpoint_dir.empty()) return Status::Ok();
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
  return WriteCheckpoint((fs::path(o_.checkpoint_dir) / kCheckpointFile).string(), ck);
}

}  // namespace shoal::aggregator
