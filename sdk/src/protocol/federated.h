// The federated family of messages (aggregator <-> client: Hello, Welcome, RoundTask,
// Update, Resync, Ack, Error, Heartbeat, Bye): encoders, and the semantic checks of their
// decoded fields. messages.h gives the typed value of each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "protocol/chunks.h"
#include "protocol/frame.h"
#include "shoal/trainer.h"

namespace shoal::protocol {

// What the aggregator asks of each update besides the task (Welcome.privacy).
struct PrivacyConfig {
  bool secagg = false;             // secure aggregation instead of Update
  double secagg_range = 0.0;       // fixed-point clipping range R
  uint32_t secagg_bits = 32;       // 32, or 16 (int8 levels)
  double dp_clip = 0.0;            // distributed DP: L2 clip of the update (0 = off)
  double dp_noise_multiplier = 0.0;
  bool operator==(const PrivacyConfig&) const = default;
};

struct WelcomeInfo {
  uint32_t client_id = 0;
  TaskConfig task;
  uint32_t heartbeat_interval_ms = 1000;
  uint32_t heartbeat_timeout_ms = 10000;
  uint32_t chunk_bytes = static_cast<uint32_t>(kDefaultChunkBytes);
  uint32_t max_frame_bytes = static_cast<uint32_t>(MaxFrameBytes(kDefaultChunkBytes));
  PrivacyConfig privacy;
  // Strictly increasing, at most kMaxCommittedRounds; absent where the aggregator keeps no
  // record of commits (no --checkpoint-dir, or an edge, whose clients' updates commit upstream).
  std::optional<std::vector<uint64_t>> committed_rounds;
};

// `features`: the Hello's capabilities beyond codecs (schemas/shoal.fbs), e.g. "standardize".
Frame EncodeHello(const Header& h, const std::string& client_name, uint64_t num_examples, const std::string& trainer,
                  const std::vector<std::string>& codecs, const std::vector<std::string>& features = {});
Frame EncodeWelcome(const Header& h, const WelcomeInfo& w);
// encoding DenseF32: the full model; Codec: the delta of `delta_round` that turns the model
// with `base_hash` into the one with `model_hash`; Unchanged: no payload.
Frame EncodeRoundTask(const Header& h, const RoundConfig& config, uint32_t deadline_ms, const std::string& model_hash,
                      wire::PayloadEncoding encoding, const ChunkRef& chunk, const std::string& base_hash = "",
                      uint64_t delta_round = 0);
// What a client reports with its update, typed. On the wire it travels as Update.metrics,
// name/value pairs; EncodeUpdate and DecodeUpdateReport are the only places those names are
// written and read.
struct UpdateReport {
  std::optional<double> train_loss;  // the trainer's mean loss over the round ("train_loss")
  double encode_seconds = 0.0;       // time the client spent in its update stages
  // Federated evaluation of the model the client received this round, on its own data.
  // Decoding keeps it only when it is plausible: examples in [1, 1e12], accuracy in [0, 1].
  std::optional<EvalResult> eval;
  std::vector<std::pair<std::string, double>> other;  // the trainer's other metrics (informational)
  // The report of a trainer's result: train_loss and the rest from TrainResult::metrics.
  static UpdateReport FromTrainer(const std::vector<std::pair<std::string, double>>& metrics);
};
Frame EncodeUpdate(const Header& h, uint64_t num_examples, const UpdateReport& report, wire::PayloadEncoding encoding,
                   const ChunkRef& chunk);
// The report of an Update frame; Protocol error for malformed metrics (too many, unnamed,
// not finite).
StatusOr<UpdateReport> DecodeUpdateReport(const wire::Update* u);
Frame EncodeResync(const Header& h, const std::string& have_hash);
// `commit_round`: the round whose commit holds the update (its task round h.round, or later
// under FedBuff); with accepted = false, the round that discarded it.
Frame EncodeAck(const Header& h, bool accepted, uint64_t commit_round);
Frame EncodeError(const Header& h, wire::ErrorCode code, const std::string& reason);
Frame EncodeHeartbeat(const Header& h, bool busy, float progress);
Frame EncodeBye(const Header& h, const std::string& reason);

// Semantic checks of decoded messages. Each returns InvalidArgument/Protocol with a reason
// fit for an Error reply.
StatusOr<WelcomeInfo> DecodeWelcome(const wire::Welcome* w);
StatusOr<RoundConfig> DecodeRoundConfig(const wire::RoundConfig* c, uint64_t round);
StatusOr<std::vector<std::pair<std::string, double>>> DecodeMetrics(
    const flatbuffers::Vector<flatbuffers::Offset<wire::Metric>>* metrics);

}  // namespace shoal::protocol
