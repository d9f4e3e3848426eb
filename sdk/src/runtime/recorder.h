// What a run leaves behind after each committed round (the aggregator) or step (a peer): one
// JSON object per line in --metrics-out, the checkpoint, and the console table row. One
// object for both, so a round's line and a step's line are built from their typed reports
// (shoal/server.h's RoundReport, shoal/peer.h's PeerStep) and written the same way; the
// caller adds only what its report does not hold (`extra`).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/checkpoint.h"
#include "shoal/peer.h"
#include "shoal/server.h"
#include "shoal/status.h"

namespace shoal::runtime {

struct RecorderOptions {
  std::string metrics_out;               // JSON lines; empty = none
  // Resuming after this round: lines of later rounds (written after the checkpoint, before a
  // crash) are dropped and new lines appended; unset = the file starts empty.
  std::optional<uint64_t> resume_after;
  std::string checkpoint_path;           // the checkpoint's file; empty = none
  bool print_table = false;              // a row per round on stdout (header every 20 rounds)
  // False on an edge aggregator, which leaves evaluation to its root: its lines have no
  // test_ fields and its table shows "-".
  bool evaluates = true;
};

class Recorder {
 public:
  // Opens (or, resuming, trims and reopens) the metrics file. IoError names the file.
  static StatusOr<std::unique_ptr<Recorder>> Open(RecorderOptions options);

  // A committed round: its line (every field of `r`, then `extra`), the checkpoint (when
  // checkpoint_path is set: `state` makes it, called only then), then the table row. The
  // line goes first: a crash between them leaves a line that resuming trims.
  Status Record(const RoundReport& r, const nlohmann::json& extra, const std::function<Checkpoint()>& state);
  // A peer's step: its line (the step's fields, then `extra`).
  Status Record(const PeerStep& s, const nlohmann::json& extra);

  bool writes_metrics() const { return out_.is_open(); }

 private:
  explicit Recorder(RecorderOptions o) : o_(std::move(o)) {}
  Status WriteLine(nlohmann::json line, const nlohmann::json& extra);
  void PrintTableRow(const RoundReport& r);

  RecorderOptions o_;
  std::ofstream out_;
  bool table_header_printed_ = false;
};

// The JSON line of a round and of a step, as Record writes them before `extra`.
nlohmann::json RoundLine(const RoundReport& r, bool evaluates);
nlohmann::json StepLine(const PeerStep& s);

// Keeps the lines of rounds <= last_round (resuming: the later ones were written after the
// checkpoint). A missing file is fine.
Status TrimMetrics(const std::string& path, uint64_t last_round);

}  // namespace shoal::runtime
