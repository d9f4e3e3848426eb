// The update as it travels (DESIGN.md §2), in both directions.
// Up: one typed value that passes through a pipeline of stages on each side.
//   client:  clip -> DP noise -> codec encode -> SecAgg mask   (delta in, payload out)
//   server:  SecAgg unmask -> codec decode -> validate          (payload in, delta out)
// Today's stages are the codec's two directions and the server's validation; differential
// privacy and secure aggregation are stages to add here, not edits to Client or Service. A
// stage changes the update in place and returns an error that says what is wrong with it; the
// pipeline prefixes the stage's name and stops at the first error, leaving the update
// unusable. A serverless peer encodes and decodes its updates with the same functions.
// Down: the server encodes a round's aggregate delta and commits base + the DECODED delta;
// every replica (a client, an edge aggregator's) computes the same model from the same
// payload with ApplyDownload, so they stay bit-identical (checked by hash at the next task).
// The codec's round contexts (which seeds) are decided here, once, for every caller.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codec/round_context.h"
#include "protocol/federated.h"
#include "shoal/status.h"

namespace shoal::codec {
class Codec;
}

namespace shoal::runtime {

struct Update {
  std::string author;              // the client's name (its codec stream and private seed)
  uint64_t round = 0;
  uint64_t num_examples = 0;       // the FedAvg weight, in [1, protocol::kMaxExamples]
  std::vector<float> delta;        // dense: w_local - w_global (DeMo: -Q), layout order
  std::vector<uint8_t> payload;    // what travels on the wire
  protocol::UpdateReport report;   // typed metrics that travel with it
};

// Why a server stage refused an update, for the Error reply and the rejection counters.
enum class Refusal { kMalformed, kShapeMismatch, kTooLarge };

class UpdateStage {
 public:
  virtual ~UpdateStage() = default;
  virtual const char* name() const = 0;
  virtual Status Apply(Update& update) = 0;
  // The refusal a failure of this stage means (server stages).
  virtual Refusal refusal() const { return Refusal::kMalformed; }
};

class UpdatePipeline {
 public:
  UpdatePipeline& Add(std::unique_ptr<UpdateStage> stage) {
    stages_.push_back(std::move(stage));
    return *this;
  }
  struct Failure {
    Refusal refusal = Refusal::kMalformed;
    Status status;  // "STAGE: reason"
  };
  // Runs every stage in order; the first failure, or nullopt when the update went through.
  std::optional<Failure> Run(Update& update) const;
  size_t size() const { return stages_.size(); }

 private:
  std::vector<std::unique_ptr<UpdateStage>> stages_;
};

// Codec encode: delta -> payload, with the round's shared seed and the author's private seed
// (error feedback keeps its residual in `codec`, which must outlive the stage).
std::unique_ptr<UpdateStage> EncodeStage(codec::Codec* codec, uint64_t task_seed);
// Codec decode: payload -> delta of `n` floats (the codec's layout size); never reads outside
// the payload.
std::unique_ptr<UpdateStage> DecodeStage(const codec::Codec* codec, uint64_t task_seed, size_t n);
// Every value finite, and (max_norm > 0) the L2 norm at most max_norm: a hostile or diverged
// client cannot wreck the model with finite but huge values.
std::unique_ptr<UpdateStage> ValidateStage(double max_norm);

// The round context of everything decoded, and of the download's encoding: the task's shared
// seed for `round`, nothing private to an author.
codec::RoundContext SharedContext(uint64_t task_seed, uint64_t round);

// The codec's upload directions, as the stages above and a peer's exchange run them: `delta`
// of `author` in `round` encoded with the round's shared seed and the author's private one
// into *payload; a payload decoded with the shared seed alone into `out` (the codec's size).
Status EncodeUpload(codec::Codec& codec, uint64_t task_seed, uint64_t round, const std::string& author,
                    std::span<const float> delta, std::vector<uint8_t>* payload);
Status DecodeUpload(const codec::Codec& codec, uint64_t task_seed, uint64_t round, std::span<const uint8_t> payload,
                    std::span<float> out);

// Download, server side: round `round`'s aggregate `delta` encoded with the download codec,
// and the model it makes of `base`. nullopt model: base + delta would not be finite, and the
// round must not commit it.
struct Download {
  std::vector<uint8_t> payload;
  std::optional<std::vector<float>> model;
};
StatusOr<Download> EncodeDownload(codec::Codec& codec, uint64_t task_seed, uint64_t round, std::span<const float> delta,
                                  std::span<const float> base);
// Download, replica side: base + the decoded payload of round `round`'s delta. An error when
// the payload does not decode or the model would not be finite.
StatusOr<std::vector<float>> ApplyDownload(const codec::Codec& codec, uint64_t task_seed, uint64_t round,
                                           std::span<const uint8_t> payload, std::span<const float> base);

}  // namespace shoal::runtime
