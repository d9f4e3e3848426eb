#include "runtime/recorder.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

namespace shoal::runtime {

namespace fs = std::filesystem;

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

StatusOr<std::unique_ptr<Recorder>> Recorder::Open(RecorderOptions options) {
  std::unique_ptr<Recorder> r(new Recorder(std::move(options)));
  const RecorderOptions& o = r->o_;
  if (!o.metrics_out.empty()) {
    if (o.resume_after) SHOAL_RETURN_IF_ERROR(TrimMetrics(o.metrics_out, *o.resume_after));
    r->out_.open(o.metrics_out, o.resume_after ? std::ios::app : std::ios::trunc);
    if (!r->out_) return Status::IoError("cannot open --metrics-out " + o.metrics_out + " for writing");
  }
  return r;
}

nlohmann::json RoundLine(const RoundReport& r, bool evaluates) {
  nlohmann::json line = {
      {"round", r.round},
      {"clients_selected", r.clients_selected},
      {"clients_reported", r.clients_reported},
      {"clients_dropped", r.clients_dropped},
      {"clients_registered", r.clients_registered},
      {"train_loss", r.train_loss},
      {"bytes_up", r.bytes_up},
      {"bytes_down", r.bytes_down},
      {"bytes_dense_equiv", r.bytes_dense_equiv},
      {"seconds", r.seconds},
      {"model_hash", r.model_hash},
      {"model_updated", r.model_updated},
      {"resyncs", r.resyncs},
      {"encode_seconds", r.encode_seconds},
      {"decode_seconds", r.decode_seconds},
      {"frames_rejected", r.frames_rejected},
      {"deadline_seconds", r.deadline_seconds},
      {"updates_late", r.updates_late},
      {"clients_moved", r.clients_moved},
      {"rejected_by_code", r.rejected_by_code},
      {"secure", r.secure},
      {"connections", r.connections},
      {"handshakes_failed", r.handshakes_failed},
      {"handshakes_refused", r.handshakes_refused},
      {"allow_list_keys", r.allow_list_keys},
  };
  if (evaluates) {
    line["test_loss"] = r.test_loss;
    line["test_accuracy"] = r.test_accuracy;
  }
  for (const StrategyMetric& m : r.strategy_metrics) line[m.name] = m.value;
  for (const StrategyMetric& m : r.evaluation_metrics) line["eval_" + m.name] = m.value;
  return line;
}

nlohmann::json StepLine(const PeerStep& s) {
  nlohmann::json line = {
      {"step", s.step},
      {"members", s.members},
      {"included", s.included},
      {"loss", s.loss},
      {"bytes_sent", s.bytes_sent},
      {"bytes_received", s.bytes_received},
      {"model_hash", s.model_hash},
      {"seconds", s.seconds},
      {"resyncs", s.resyncs},
      {"frames_rejected", s.frames_rejected},
  };
  if (s.eval) {  // on the held-out split, or the application trainer's own evaluation
    line[s.eval_held_out ? "test_accuracy" : "eval_accuracy"] = s.eval->accuracy;
    line[s.eval_held_out ? "test_loss" : "eval_loss"] = s.eval->loss;
  }
  return line;
}

Status Recorder::WriteLine(nlohmann::json line, const nlohmann::json& extra) {
  if (!out_.is_open()) return Status::Ok();
  for (const auto& [key, value] : extra.items()) line[key] = value;
  out_ << line.dump() << '\n';
  out_.flush();
  if (!out_) return Status::IoError("writing --metrics-out " + o_.metrics_out + " failed");
  return Status::Ok();
}

Status Recorder::Record(const RoundReport& r, const nlohmann::json& extra, const std::function<Checkpoint()>& state) {
  SHOAL_RETURN_IF_ERROR(WriteLine(RoundLine(r, o_.evaluates), extra));
  if (!o_.checkpoint_path.empty()) SHOAL_RETURN_IF_ERROR(WriteCheckpoint(o_.checkpoint_path, state()));
  if (o_.print_table) PrintTableRow(r);
  return Status::Ok();
}

Status Recorder::Record(const PeerStep& s, const nlohmann::json& extra) { return WriteLine(StepLine(s), extra); }

void Recorder::PrintTableRow(const RoundReport& r) {
  if (r.round == 1 || r.round % 20 == 1 || !table_header_printed_)
    std::printf("%6s %9s %9s %12s %12s %9s %5s\n", "round", "accuracy", "loss", "bytes_up", "bytes_down", "ms", "ok");
  table_header_printed_ = true;
  char accuracy[32] = "-", loss[32] = "-";
  if (o_.evaluates) {
    std::snprintf(accuracy, sizeof accuracy, "%.4f", r.test_accuracy);
    std::snprintf(loss, sizeof loss, "%.4f", r.test_loss);
  }
  std::printf("%6llu %9s %9s %12llu %12llu %9.1f %2zu/%zu\n", static_cast<unsigned long long>(r.round), accuracy, loss,
              static_cast<unsigned long long>(r.bytes_up), static_cast<unsigned long long>(r.bytes_down),
              r.seconds * 1000.0, r.clients_reported, r.clients_selected);
  std::fflush(stdout);
}

}  // namespace shoal::runtime
