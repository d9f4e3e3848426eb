#include "codec/bytes.h"

#include <string>

namespace shoal::codec {

Status ByteReader::Truncated(size_t n, std::string_view what) const {
  return Status::Corruption("codec payload truncated: need " + std::to_string(n) + " bytes for " + std::string(what) +
                            " at offset " + std::to_string(pos_) + ", " + std::to_string(remaining()) + " left");
}

Status ByteReader::ReadVarint(uint64_t* v, std::string_view what) {
  uint64_t result = 0;
  for (int i = 0; i < 10; ++i) {
    if (pos_ >= data_.size()) return Truncated(1, what);
    uint8_t b = data_[pos_++];
    if (i == 9 && b > 1) return Status::Corruption("codec payload: varint overflows 64 bits (" + std::string(what) + ")");
    result |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if (!(b & 0x80)) {
      // Refuse over-long encodings (a trailing zero group) so each value has one encoding.
      if (i > 0 && b == 0) return Status::Corruption("codec payload: over-long varint (" + std::string(what) + ")");
      *v = result;
      return Status::Ok();
    }
  }
  return Status::Corruption("codec payload: varint longer than 10 bytes (" + std::string(what) + ")");
}

Status ByteReader::ReadBytes(size_t n, std::span<const uint8_t>* out, std::string_view what) {
  if (remaining() < n) return Truncated(n, what);
  *out = data_.subspan(pos_, n);
  pos_ += n;
  return Status::Ok();
}

Status ByteReader::ReadFloats(size_t n, std::vector<float>* out, std::string_view what) {
  if (n > remaining() / sizeof(float)) return Truncated(n > SIZE_MAX / sizeof(float) ? SIZE_MAX : n * sizeof(float), what);
  out->resize(n);
  if (n != 0) std::memcpy(out->data(), data_.data() + pos_, n * sizeof(float));  // an empty vector has no data pointer
  pos_ += n * sizeof(float);
  return Status::Ok();
}

size_t PackedBytes(size_t count, int bits) {
  // count * bits may exceed size_t only for absurd counts; callers bound count by the layout.
  return (count * static_cast<size_t>(bits) + 7) / 8;
}

void PackBits(std::span<const uint32_t> values, int bits, uint8_t* out) {
  uint64_t acc = 0;
  int filled = 0;
  size_t o = 0;
  for (uint32_t v : values) {
    acc |= static_cast<uint64_t>(v) << filled;
    filled += bits;
    while (filled >= 8) {
      out[o++] = static_cast<uint8_t>(acc);
      acc >>= 8;
      filled -= 8;
    }
  }
  if (filled > 0) out[o++] = static_cast<uint8_t>(acc);
}

Status UnpackBits(std::span<const uint8_t> in, int bits, std::span<uint32_t> values) {
  if (in.size() != PackedBytes(values.size(), bits)) {
    return Status::Corruption("codec payload: bit-packed block has " + std::to_string(in.size()) + " bytes, expected " +
                              std::to_string(PackedBytes(values.size(), bits)));
  }
  const uint64_t mask = bits == 32 ? 0xffffffffULL : ((uint64_t{1} << bits) - 1);
  uint64_t acc = 0;
  int filled = 0;
  size_t i = 0;
  for (uint32_t& v : values) {
    while (filled < bits) {
      acc |= static_cast<uint64_t>(in[i++]) << filled;
      filled += 8;
    }
    v = static_cast<uint32_t>(acc & mask);
    acc >>= bits;
    filled -= bits;
  }
  if (acc != 0) return Status::Corruption("codec payload: non-zero padding bits in a bit-packed block");
  return Status::Ok();
}

}  // namespace shoal::codec
