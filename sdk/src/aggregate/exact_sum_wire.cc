// ExactSum's exact state as bytes: what an edge aggregator sends its parent (PayloadEncoding
// PartialSum), so the parent's sum of partial sums is the sum of every update, bit for bit.
//
// Wire layout: one zstd frame (content size declared) holding, little-endian:
//   "SXS1"  u64 n  u64 count  u64 total_weight  u64 wide_count
//   n coordinates, each a tag byte:
//     0            the value 0
//     0xff         a wide coordinate: its value is in the wide list below
//     s<<7 | L     L in [1, 16]: i16 exponent e (>= -149), then the L bytes of |m| (the last
//                  non-zero), s the sign: the value is (-1)^s * m * 2^e
//   wide_count entries, by ascending index: u64 index, six u64 limbs (two's complement, unit
//   2^-149, the exact form's wide value)
// A typical coordinate of a sum of float updates takes 7 to 9 bytes before compression.
//
// Refuses (Corruption): not one zstd frame, or a content size beyond the layout's largest; a
// wrong magic or n; a count of 0 with a weight, or more Adds than weight; a weight above 2^63;
// a tag, length or exponent out of range, or a length byte with a zero top byte; wide entries
// out of order, outside n, not marked 0xff, or marked and missing; trailing bytes; and any
// value of magnitude 2^(bitlength(total_weight) + 129) or more (the sum of valid updates stays
// below total_weight * 2^128).
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "aggregate/exact_sum.h"
#include "aggregate/exact_sum_bits.h"

namespace shoal::aggregator {
namespace {

constexpr char kMagic[4] = {'S', 'X', 'S', '1'};
constexpr size_t kHeaderBytes = 4 + 4 * 8;
constexpr uint8_t kWideTag = 0xff;
constexpr size_t kWideEntryBytes = 8 + 6 * 8;

template <typename T>
void Put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (the project's targets)
  out.insert(out.end(), b, b + sizeof(T));
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  template <typename T>
  bool Get(T* v) {
    if (b_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

// Bits of a wide value's magnitude.
int WideBitLength(const exact::Wide& w) {
  const exact::Wide m = exact::WideMagnitude(w);
  for (int k = 5; k >= 0; --k)
    if (m[k]) return 64 * k + 64 - std::countl_zero(m[k]);
  return 0;
}

Status Bad(const std::string& why) { return Status::Corruption("partial sum: " + why); }

// The layout's largest size for n coordinates (each in the wide form), before compression.
size_t MaxRawBytes(size_t n) { return kHeaderBytes + n * (1 + kWideEntryBytes); }

}  // namespace

size_t ExactSum::MaxSerializedBytes(size_t n) { return ZSTD_compressBound(MaxRawBytes(n)); }

std::vector<uint8_t> ExactSum::Serialize() const {
  if (single()) {  // written in the exact form, the only one the wire has
    ExactSum exact = *this;
    exact.MakeExact();
    return exact.Serialize();
  }
  std::vector<uint8_t> raw;
  raw.reserve(kHeaderBytes + n_ * 9 + wide_.size() * kWideEntryBytes);
  raw.insert(raw.end(), kMagic, kMagic + 4);
  Put<uint64_t>(raw, n_);
  Put<uint64_t>(raw, count_);
  Put<uint64_t>(raw, weight_);
  Put<uint64_t>(raw, wide_.size());
  for (size_t i = 0; i < n_; ++i) {
    if (mantissa_.empty()) {
      raw.push_back(0);
      continue;
    }
    if (exponent_[i] == kInWide) {
      raw.push_back(kWideTag);
      continue;
    }
    const Int128 m = mantissa_[i];
    if (m == 0) {
      raw.push_back(0);
      continue;
    }
    const UInt128 mag = m < 0 ? -static_cast<UInt128>(m) : static_cast<UInt128>(m);
    const int length = (exact::BitLength(mag) + 7) / 8;
    raw.push_back(static_cast<uint8_t>((m < 0 ? 0x80 : 0) | length));
    Put<int16_t>(raw, exponent_[i]);
    for (int b = 0; b < length; ++b) raw.push_back(static_cast<uint8_t>(mag >> (8 * b)));
  }
  std::vector<size_t> wide;
  for (const auto& [i, w] : wide_) wide.push_back(i);
  std::sort(wide.begin(), wide.end());
  for (size_t i : wide) {
    Put<uint64_t>(raw, i);
    for (uint64_t limb : wide_.at(i)) Put<uint64_t>(raw, limb);
  }
  std::vector<uint8_t> out(ZSTD_compressBound(raw.size()));
  const size_t packed = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 1);
  // Compressing into a buffer of compressBound bytes cannot fail.
  out.resize(ZSTD_isError(packed) ? 0 : packed);
  return out;
}

StatusOr<ExactSum> ExactSum::Deserialize(std::span<const uint8_t> bytes, size_t n) {
  const size_t frame = ZSTD_findFrameCompressedSize(bytes.data(), bytes.size());
  if (ZSTD_isError(frame) || frame != bytes.size()) return Bad("not exactly one zstd frame");
  const unsigned long long declared = ZSTD_getFrameContentSize(bytes.data(), bytes.size());
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN || declared == ZSTD_CONTENTSIZE_ERROR || declared > MaxRawBytes(n))
    return Bad("the frame does not declare a size up to " + std::to_string(MaxRawBytes(n)) + " bytes");
  std::vector<uint8_t> raw(declared);
  const size_t got = ZSTD_decompress(raw.data(), raw.size(), bytes.data(), bytes.size());
  if (ZSTD_isError(got) || got != raw.size()) return Bad("the zstd frame does not decompress to its declared size");

  Reader r(raw);
  char magic[4];
  uint64_t size = 0, count = 0, weight = 0, wide_count = 0;
  for (char& c : magic)
    if (!r.Get(&c)) return Bad("truncated header");
  if (std::memcmp(magic, kMagic, 4) != 0) return Bad("not a partial sum (magic)");
  if (!r.Get(&size) || !r.Get(&count) || !r.Get(&weight) || !r.Get(&wide_count)) return Bad("truncated header");
  if (size != n) return Bad(std::to_string(size) + " coordinates, the model has " + std::to_string(n));
  if (weight > kMaxTotalWeight || count > weight || (count == 0) != (weight == 0))
    return Bad("count " + std::to_string(count) + " and total weight " + std::to_string(weight) + " do not fit");
  if (wide_count > n) return Bad("more wide coordinates than coordinates");

  ExactSum s(n);
  s.count_ = count;
  s.weight_ = weight;
  if (count == 0) {  // n zero tags
    uint8_t tag = 0;
    for (size_t i = 0; i < n; ++i)
      if (!r.Get(&tag) || tag != 0) return Bad("values in an empty sum");
    if (wide_count != 0 || !r.done()) return Bad("values in an empty sum");
    return s;
  }
  s.mantissa_.assign(n, 0);
  s.exponent_.assign(n, 0);
  const int limit = exact::BitLength(weight) + 129;  // a value's bit length stays below this
  size_t marked = 0;
  for (size_t i = 0; i < n; ++i) {
    uint8_t tag = 0;
    if (!r.Get(&tag)) return Bad("truncated at coordinate " + std::to_string(i));
    if (tag == 0) continue;
    if (tag == kWideTag) {
      s.exponent_[i] = kInWide;
      ++marked;
      continue;
    }
    const int length = tag & 0x7f;
    int16_t e = 0;
    if (length < 1 || length > 16 || !r.Get(&e)) return Bad("coordinate " + std::to_string(i) + ": bad tag or truncated");
    UInt128 mag = 0;
    uint8_t byte = 0;
    for (int b = 0; b < length; ++b) {
      if (!r.Get(&byte)) return Bad("coordinate " + std::to_string(i) + ": truncated");
      mag |= static_cast<UInt128>(byte) << (8 * b);
    }
    if (byte == 0) return Bad("coordinate " + std::to_string(i) + ": a zero top byte");
    if (e < exact::kWideUnit || exact::BitLength(mag) > 127 || exact::BitLength(mag) + e >= limit)
      return Bad("coordinate " + std::to_string(i) + ": out of range for its weight");
    const auto m = static_cast<Int128>(mag);
    s.mantissa_[i] = (tag & 0x80) ? -m : m;
    s.exponent_[i] = e;
  }
  if (marked != wide_count) return Bad("the wide list does not match the coordinates marked wide");
  uint64_t previous = 0;
  for (uint64_t k = 0; k < wide_count; ++k) {
    uint64_t i = 0;
    Wide w{};
    if (!r.Get(&i)) return Bad("truncated wide list");
    for (auto& limb : w)
      if (!r.Get(&limb)) return Bad("truncated wide list");
    if (i >= n || (k > 0 && i <= previous) || s.exponent_[i] != kInWide)
      return Bad("wide entry " + std::to_string(k) + ": index out of order or not marked wide");
    if (WideBitLength(w) + exact::kWideUnit >= limit) return Bad("wide coordinate " + std::to_string(i) + ": out of range");
    previous = i;
    s.wide_[i] = w;
  }
  if (!r.done()) return Bad("trailing bytes");
  return s;
}

}  // namespace shoal::aggregator
