// Byte-level helpers of the codec wire format: a growing ByteWriter and a bounds-checked
// ByteReader (little-endian scalars, LEB128 varints, raw spans), plus LSB-first bit packing.
// Every ByteReader call checks the remaining length before touching memory and returns
// Corruption naming what was being read, so hostile payloads fail cleanly.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "shoal/status.h"

namespace shoal::codec {

static_assert(std::endian::native == std::endian::little, "the codec wire format assumes a little-endian host");

class ByteWriter {
 public:
  ByteWriter() = default;
  // Writes into `buffer`, emptied first, keeping its capacity (Release gives it back).
  explicit ByteWriter(std::vector<uint8_t> buffer) : buf_(std::move(buffer)) { buf_.clear(); }
  void Reserve(size_t n) { buf_.reserve(n); }
  // Empties the writer, keeping its capacity (reuse across encodes).
  void Clear() { buf_.clear(); }
  // Drops everything after the first n bytes.
  void Truncate(size_t n) { buf_.resize(std::min(n, buf_.size())); }

  void PutU8(uint8_t v) { buf_.push_back(v); }
  void PutU16(uint16_t v) { Put(&v, sizeof v); }
  void PutU32(uint32_t v) { Put(&v, sizeof v); }
  void PutU64(uint64_t v) { Put(&v, sizeof v); }
  void PutF32(float v) { Put(&v, sizeof v); }
  // Unsigned LEB128: 7 bits per byte, at most 10 bytes.
  void PutVarint(uint64_t v) {
    while (v >= 0x80) {
      buf_.push_back(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    buf_.push_back(static_cast<uint8_t>(v));
  }
  void PutBytes(std::span<const uint8_t> bytes) { Put(bytes.data(), bytes.size()); }
  // The raw float32 values (a state's arrays; ReadFloats reads them back).
  void PutFloats(std::span<const float> values) { Put(values.data(), values.size() * sizeof(float)); }
  // Appends n bytes (zeroed) and returns a pointer to them for bulk writes; valid until the
  // next call on this writer.
  uint8_t* Extend(size_t n) {
    size_t old = buf_.size();
    buf_.resize(old + n);
    return buf_.data() + old;
  }

  size_t size() const { return buf_.size(); }
  uint8_t* data() { return buf_.data(); }
  const std::vector<uint8_t>& bytes() const { return buf_; }
  std::vector<uint8_t>* mutable_bytes() { return &buf_; }
  std::vector<uint8_t> Release() { return std::move(buf_); }

 private:
  void Put(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  std::vector<uint8_t> buf_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> data) : data_(data) {}

  size_t remaining() const { return data_.size() - pos_; }
  size_t position() const { return pos_; }
  bool empty() const { return remaining() == 0; }

  Status ReadU8(uint8_t* v, std::string_view what = "u8") { return Read(v, sizeof *v, what); }
  Status ReadU16(uint16_t* v, std::string_view what = "u16") { return Read(v, sizeof *v, what); }
  Status ReadU32(uint32_t* v, std::string_view what = "u32") { return Read(v, sizeof *v, what); }
  Status ReadU64(uint64_t* v, std::string_view what = "u64") { return Read(v, sizeof *v, what); }
  Status ReadF32(float* v, std::string_view what = "f32") { return Read(v, sizeof *v, what); }
  // Refuses varints longer than 10 bytes or overflowing 64 bits.
  Status ReadVarint(uint64_t* v, std::string_view what = "varint");
  // A view of the next n bytes (no copy); Corruption when fewer remain.
  Status ReadBytes(size_t n, std::span<const uint8_t>* out, std::string_view what = "bytes");
  // The next n raw float32 values into *out (resized to n); Corruption when fewer remain.
  Status ReadFloats(size_t n, std::vector<float>* out, std::string_view what = "floats");

 private:
  Status Read(void* dst, size_t n, std::string_view what) {
    if (remaining() < n) return Truncated(n, what);
    std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
    return Status::Ok();
  }
  Status Truncated(size_t n, std::string_view what) const;

  std::span<const uint8_t> data_;
  size_t pos_ = 0;
};

// Bit packing, LSB first: value i occupies bits [i*bits, (i+1)*bits) of the stream; the last
// byte is zero-padded. bits in [1, 32]; every value must fit in `bits` bits.
size_t PackedBytes(size_t count, int bits);
void PackBits(std::span<const uint32_t> values, int bits, uint8_t* out);
// Unpacks values.size() values from exactly PackedBytes(values.size(), bits) bytes. Returns
// Corruption when the padding bits of the last byte are not zero (so every payload has exactly
// one encoding).
Status UnpackBits(std::span<const uint8_t> in, int bits, std::span<uint32_t> values);

}  // namespace shoal::codec
