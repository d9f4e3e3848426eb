// Chunking: a payload cut into balanced chunks for the wire, and reassembled from them in any
// order with every chunk checked against the others and a size limit; dense float32 payloads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "protocol/frame.h"

namespace shoal::protocol {

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

// The wire table of a chunk.
flatbuffers::Offset<wire::Chunk> BuildChunk(flatbuffers::FlatBufferBuilder& fbb, const ChunkRef& c);

}  // namespace shoal::protocol
