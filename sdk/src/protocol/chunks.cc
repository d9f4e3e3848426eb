#include "protocol/chunks.h"

#include <cmath>
#include <cstring>
#include <string>

namespace shoal::protocol {

using flatbuffers::FlatBufferBuilder;

flatbuffers::Offset<wire::Chunk> BuildChunk(FlatBufferBuilder& fbb, const ChunkRef& c) {
  auto data = fbb.CreateVector(c.data.data(), c.data.size());
  return wire::CreateChunk(fbb, c.index, c.count, c.offset, c.total_bytes, data);
}

std::vector<ChunkRef> SplitPayload(std::span<const uint8_t> payload, size_t chunk_bytes) {
  if (chunk_bytes == 0) chunk_bytes = kDefaultChunkBytes;
  const uint64_t total = payload.size();
  const uint64_t count = total == 0 ? 1 : (total + chunk_bytes - 1) / chunk_bytes;
  const uint64_t stride = total == 0 ? 0 : (total + count - 1) / count;  // balanced chunks
  std::vector<ChunkRef> out;
  out.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t off = i * stride;
    uint64_t len = std::min<uint64_t>(stride, total - off);
    out.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(count), off, total, payload.subspan(off, len)});
  }
  return out;
}

ChunkView ViewChunk(const wire::Chunk* c) {
  ChunkView v;
  if (!c) return v;
  v.present = true;
  v.index = c->index();
  v.count = c->count();
  v.offset = c->offset();
  v.total_bytes = c->total_bytes();
  if (c->data()) v.data = std::span<const uint8_t>(c->data()->data(), c->data()->size());
  return v;
}

// What a chunk must be on its own: present, within the limit, its index below its count, the
// count possible for the total without empty chunks, and its offset and length those of a
// balanced split. Returns the split's stride.
StatusOr<uint64_t> ChunkAssembler::Check(const ChunkView& c, uint64_t max_total) {
  if (!c.present) return Status::Protocol("message has no payload chunk");
  const uint64_t total = c.total_bytes;
  const uint32_t count = c.count;
  const uint32_t index = c.index;
  const uint64_t len = c.data.size();
  if (total > max_total)
    return Status::Protocol("payload of " + std::to_string(total) + " bytes exceeds the limit of " +
                            std::to_string(max_total) + " bytes");
  if (count == 0 || index >= count)
    return Status::Protocol("chunk index " + std::to_string(index) + " is not below count " + std::to_string(count));
  if (total > 0 ? count > total : count != 1)
    return Status::Protocol("chunk count " + std::to_string(count) + " is impossible for " + std::to_string(total) +
                            " bytes");
  const uint64_t stride = total == 0 ? 0 : (total + count - 1) / count;
  // A balanced split never leaves a chunk empty; reject counts that would.
  if (total > 0 && stride * (count - 1) >= total)
    return Status::Protocol("chunk count " + std::to_string(count) + " leaves empty chunks for " +
                            std::to_string(total) + " bytes");
  const uint64_t want_off = index * stride;
  const uint64_t want_len = std::min<uint64_t>(stride, total - want_off);
  if (c.offset != want_off || len != want_len)
    return Status::Protocol("chunk " + std::to_string(index) + " has offset " + std::to_string(c.offset) +
                            " and length " + std::to_string(len) + "; expected " + std::to_string(want_off) + " and " +
                            std::to_string(want_len));
  return stride;
}

StatusOr<std::optional<std::span<const uint8_t>>> ChunkAssembler::Whole(const ChunkView& c, uint64_t max_total_bytes) {
  if (!c.present || c.count != 1) return std::optional<std::span<const uint8_t>>();
  SHOAL_RETURN_IF_ERROR(Check(c, max_total_bytes).status());
  return std::optional<std::span<const uint8_t>>(c.data);
}

Status ChunkAssembler::Add(const ChunkView& c) {
  SHOAL_ASSIGN_OR_RETURN(const uint64_t stride, Check(c, max_total_));
  const uint64_t total = c.total_bytes;
  const uint32_t count = c.count;
  const uint32_t index = c.index;
  if (!started_) {
    started_ = true;
    count_ = count;
    total_ = total;
    stride_ = stride;
  } else if (count != count_ || total != total_) {
    return Status::Protocol("chunk disagrees with earlier chunks of the payload (count/total)");
  }
  if (index < next_ || pending_.count(index))
    return Status::Protocol("chunk " + std::to_string(index) + " was already received");
  ++received_;
  // Memory follows the bytes that arrived, never the total a first chunk declares: chunks in
  // order are appended (the buffer grows geometrically, up to the total), a chunk ahead of
  // its turn waits on its own until the ones before it came.
  auto append = [&](std::span<const uint8_t> data) {
    const uint64_t need = bytes_.size() + data.size();
    if (need > bytes_.capacity()) bytes_.reserve(std::min<uint64_t>(total_, std::max<uint64_t>(need, 2 * bytes_.capacity())));
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    ++next_;
  };
  if (index != next_) {
    pending_bytes_ += c.data.size();
    pending_.emplace(index, std::vector<uint8_t>(c.data.begin(), c.data.end()));
    return Status::Ok();
  }
  append(c.data);
  for (auto it = pending_.begin(); it != pending_.end() && it->first == next_; it = pending_.erase(it)) {
    pending_bytes_ -= it->second.size();
    append(it->second);
  }
  return Status::Ok();
}

std::vector<uint8_t> ChunkAssembler::Take() {
  std::vector<uint8_t> out = std::move(bytes_);
  started_ = false;
  count_ = received_ = next_ = 0;
  total_ = stride_ = pending_bytes_ = 0;
  pending_.clear();
  bytes_.clear();
  return out;
}

std::span<const uint8_t> AsBytes(std::span<const float> v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()};
}

StatusOr<std::vector<float>> DecodeDenseF32(std::span<const uint8_t> bytes, size_t expected_count) {
  if (bytes.size() != expected_count * sizeof(float))
    return Status::Protocol("dense payload has " + std::to_string(bytes.size()) + " bytes; the model needs " +
                            std::to_string(expected_count * sizeof(float)));
  std::vector<float> out(expected_count);
  if (expected_count) std::memcpy(out.data(), bytes.data(), bytes.size());
  for (size_t i = 0; i < out.size(); ++i)
    if (!std::isfinite(out[i]))
      return Status::Protocol("payload value " + std::to_string(i) + " is not finite (NaN or Inf)");
  return out;
}

}  // namespace shoal::protocol
