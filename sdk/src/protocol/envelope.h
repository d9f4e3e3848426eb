// Encoding and checking of wire frames (DESIGN.md §4). Every inbound frame goes through
// VerifyFrame (size → FlatBuffers Verifier → version) and then the semantic Decode* checks
// before anything uses it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "protocol/limits.h"
#include "shoal/status.h"
#include "shoal/trainer.h"
#include "shoal/wire/shoal_generated.h"

namespace shoal::protocol {

// Bumped only for changes old peers cannot read (see schemas/shoal.fbs).
// 2: RingSegment (ring all-reduce swarms); 3: SecAgg*, PrivacyConfig; 4: SecAgg's consistency
// round (SecAggCheckSignature, SecAggUnmaskProof), long-term signing identities
inline constexpr uint32_t kProtocolVersion = 6;

using Frame = std::vector<uint8_t>;

// Envelope fields shared by every message.
struct Header {
  uint64_t session = 0;
  uint64_t round = 0;
  uint32_t sender = 0;
  uint64_t sequence = 0;
};

// Result of VerifyFrame: the envelope (pointing into the frame's bytes) or why it was refused.
struct Verified {
  const wire::Envelope* envelope = nullptr;  // into the frame, or into `aligned`
  wire::ErrorCode error = wire::ErrorCode::Unknown;
  std::string reason;
  // FlatBuffers reads scalars in place and needs the buffer 8-byte aligned; ZeroMQ hands out
  // small messages at any offset of its receive buffer. Such a frame is verified and read
  // from this aligned copy (heap storage: a moved Verified keeps `envelope` valid).
  std::unique_ptr<uint64_t[]> aligned;
  bool ok() const { return envelope != nullptr; }
};
// Size check, file identifier, FlatBuffers Verifier with tight depth/table limits, a known
// message kind, then the protocol version (VersionMismatch names both versions).
Verified VerifyFrame(std::span<const uint8_t> frame, size_t max_frame_bytes);

// One chunk of a payload, ready to encode.
struct ChunkRef {
  uint32_t index = 0;
  uint32_t count = 1;
  uint64_t offset = 0;
  uint64_t total_bytes = 0;
  std::span<const uint8_t> data;
};
// One chunk of a payload as received (the bytes point into the frame).
struct ChunkView {
  uint32_t index = 0;
  uint32_t count = 0;
  uint64_t offset = 0;
  uint64_t total_bytes = 0;
  std::span<const uint8_t> data;
  bool present = false;  // the message carried a chunk at all
};
ChunkView ViewChunk(const wire::Chunk* chunk);  // null: not present

// Cuts `payload` into balanced chunks of at most `chunk_bytes` (see Chunk in the schema).
// An empty payload gives one empty chunk.
std::vector<ChunkRef> SplitPayload(std::span<const uint8_t> payload, size_t chunk_bytes);

// Reassembles one payload from its chunks, in any order, checking each against the others
// and against a size limit before allocating. Duplicate or inconsistent chunks are errors.
class ChunkAssembler {
 public:
  // max_total_bytes: the largest payload acceptable here (e.g. the model's size in bytes).
  explicit ChunkAssembler(uint64_t max_total_bytes) : max_total_(max_total_bytes) {}
  Status Add(const ChunkView& chunk);
  Status Add(const wire::Chunk* chunk) { return Add(ViewChunk(chunk)); }
  // A payload that travels in one chunk, without assembling it: the chunk's bytes (a view into
  // the frame), after the checks Add makes; nullopt when it has several chunks, or none (Add
  // them, or Add says what is wrong).
  static StatusOr<std::optional<std::span<const uint8_t>>> Whole(const ChunkView& chunk, uint64_t max_total_bytes);
  bool complete() const { return started_ && received_ == count_; }
  uint32_t received() const { return received_; }
  // Bytes held now: at most twice what arrived (not the total a sender declares).
  uint64_t held_bytes() const { return bytes_.capacity() + pending_bytes_; }
  // The payload; only when complete(). Leaves the assembler empty.
  std::vector<uint8_t> Take();

 private:
  static StatusOr<uint64_t> Check(const ChunkView& chunk, uint64_t max_total);  // the split's stride

  uint64_t max_total_;
  bool started_ = false;
  uint32_t count_ = 0;
  uint32_t received_ = 0;
  uint64_t total_ = 0;
  uint64_t stride_ = 0;
  uint32_t next_ = 0;                                   // chunks [0, next_) are in bytes_
  std::vector<uint8_t> bytes_;                          // the payload's prefix, in order
  std::map<uint32_t, std::vector<uint8_t>> pending_;    // chunks that came ahead of their turn
  uint64_t pending_bytes_ = 0;
};

// Dense float32 payloads ----------------------------------------------------------------------
std::span<const uint8_t> AsBytes(std::span<const float> v);
// Exactly `expected_count` finite floats; ShapeMismatch / NonFinite reasons otherwise.
StatusOr<std::vector<float>> DecodeDenseF32(std::span<const uint8_t> bytes, size_t expected_count);

// Messages ------------------------------------------------------------------------------------
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
StatusOr<TaskConfig> DecodeTask(const wire::TaskConfig* t);
StatusOr<RoundConfig> DecodeRoundConfig(const wire::RoundConfig* c, uint64_t round);
StatusOr<std::vector<std::pair<std::string, double>>> DecodeMetrics(
    const flatbuffers::Vector<flatbuffers::Offset<wire::Metric>>* metrics);

// Building blocks shared with the other message files (messages.cc, peer.cc): the envelope
// around a message, a chunk, a task table, the string check every decoder applies (present
// when required, at most 4096 bytes), and a string's text ("" when absent).
Frame Finish(flatbuffers::FlatBufferBuilder& fbb, const Header& h, wire::Message kind, flatbuffers::Offset<void> msg);
flatbuffers::Offset<wire::Chunk> BuildChunk(flatbuffers::FlatBufferBuilder& fbb, const ChunkRef& c);
flatbuffers::Offset<wire::TaskConfig> BuildTask(flatbuffers::FlatBufferBuilder& fbb, const TaskConfig& t);
Status CheckString(const flatbuffers::String* s, const char* what, bool required);
std::string StringOrEmpty(const flatbuffers::String* s);
// A byte field of exactly N bytes (keys, signatures) copied into `out`; Protocol(`error`) when
// it is absent or of another length.
template <size_t N>
Status CopyFixedBytes(const flatbuffers::Vector<uint8_t>* v, std::array<uint8_t, N>& out, const std::string& error) {
  if (!v || v->size() != N) return Status::Protocol(error);
  std::copy(v->begin(), v->end(), out.begin());
  return Status::Ok();
}

// The names of clients and of peers: 1-64 printable ASCII characters, no spaces.
bool ValidName(const std::string& name);

// Short name of a message kind for logs and metrics ("Hello", "Update", ...).
const char* MessageName(wire::Message kind);

}  // namespace shoal::protocol
