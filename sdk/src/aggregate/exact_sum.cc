#include "aggregate/exact_sum.h"

#include "aggregate/exact_sum_bits.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

namespace shoal::aggregator {
namespace {

using u128 = UInt128;
using exact::AddWide;
using exact::BitLength;
using exact::kWideUnit;
using exact::Magnitude;
using exact::WideNegative;

// Nearest double (ties to even) to  mag * 2^exp  for mag < 2^128: keep the top 64 bits and fold
// every dropped bit into the lowest kept one (a sticky bit), so the one rounding, in the
// uint64 -> double conversion, is correct. Exact for exp >= -1074 - 64, which holds here.
double RoundToDouble(u128 mag, int exp) {
  const int len = BitLength(mag);
  if (len > 64) {
    const int drop = len - 64;
    const bool sticky = (mag & ((u128{1} << drop) - 1)) != 0;
    mag = (mag >> drop) | static_cast<u128>(sticky);
    exp += drop;
  }
  const double d = static_cast<double>(static_cast<uint64_t>(mag));
  // d * 2^exp by one multiplication when 2^exp is a normal double: exact, as ldexp is (d >= 1,
  // so the product is normal too, or infinite where ldexp's is).
  if (exp >= -1022 && exp <= 1023) return d * std::bit_cast<double>(static_cast<uint64_t>(exp + 1023) << 52);
  return std::ldexp(d, exp);
}

// v * 2^shift (v signed, 0 <= shift, result fits in 384 bits) in two's complement.
std::array<uint64_t, 6> ToWide(Int128 v, int shift) {
  std::array<uint64_t, 6> w{};
  const uint64_t fill = v < 0 ? ~uint64_t{0} : 0;
  // v sign-extended into 3 limbs, then shifted by whole limbs and bits.
  const uint64_t src[3] = {static_cast<uint64_t>(v), static_cast<uint64_t>(static_cast<u128>(v) >> 64), fill};
  const int limbs = shift / 64, bits = shift % 64;
  for (int i = 0; i < 6; ++i) {
    const int j = i - limbs;  // source limb landing here
    const uint64_t cur = j < 0 ? 0 : (j < 3 ? src[j] : fill);
    const uint64_t below = j - 1 < 0 ? 0 : (j - 1 < 3 ? src[j - 1] : fill);
    w[i] = bits ? (cur << bits) | (below >> (64 - bits)) : cur;
  }
  return w;
}

bool WideZero(const std::array<uint64_t, 6>& w) {
  for (uint64_t l : w)
    if (l) return false;
  return true;
}

// The correctly rounded double of a wide value.
double WideToDouble(std::array<uint64_t, 6> w) {
  const bool negative = WideNegative(w);
  w = exact::WideMagnitude(w);
  int top = 5;
  while (top > 0 && w[top] == 0) --top;
  // Take the 128 bits ending at the top non-zero limb; lower limbs become the sticky bit.
  const int lo = top > 0 ? top - 1 : 0;
  u128 mag = (static_cast<u128>(w[top]) << (top > 0 ? 64 : 0)) | (top > 0 ? w[lo] : 0);
  // With top > 0, mag has more than 64 bits, so RoundToDouble drops its bit 0: the lower limbs
  // can be folded into it as a sticky bit without changing the rounding.
  for (int i = 0; i < lo; ++i) mag |= static_cast<u128>(w[i] != 0);
  const int exp = kWideUnit + 64 * lo;
  const double d = RoundToDouble(mag, exp);
  return negative ? -d : d;
}

Status WeightInRange(uint64_t weight) {
  if (weight == 0 || weight > ExactSum::kMaxWeight)
    return Status::InvalidArgument("weight " + std::to_string(weight) + " is outside [1, 2^40]");
  return Status::Ok();
}

}  // namespace

ExactSum::ExactSum(size_t n) : n_(n) {}

void ExactSum::MakeExact() {
  if (mantissa_.size() == n_) return;
  mantissa_.assign(n_, 0);
  exponent_.assign(n_, 0);
  if (!single()) return;
  for (size_t i = 0; i < n_; ++i) AddValue(i, single_[i], single_weight_);
  single_.clear();
}

void ExactSum::Clear() {
  if (!mantissa_.empty()) {
    std::fill(mantissa_.begin(), mantissa_.end(), 0);
    std::fill(exponent_.begin(), exponent_.end(), 0);
  }
  single_.clear();
  wide_.clear();
  count_ = weight_ = 0;
}

Status ExactSum::Check(std::span<const float> x, size_t n, uint64_t weight) {
  if (x.size() != n)
    return Status::InvalidArgument("update has " + std::to_string(x.size()) + " values, the sum " + std::to_string(n));
  SHOAL_RETURN_IF_ERROR(WeightInRange(weight));
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i])) return Status::InvalidArgument("value " + std::to_string(i) + " is not finite");
  return Status::Ok();
}

// Coordinate i += t * 2^e (|t| < 2^64). The common case first, without data-dependent
// branches, and inlined into Add: a narrow coordinate, both parts aligned to the smaller
// exponent by shifts of at most 62, each part then below 2^126 in magnitude (M is checked), so
// their sum fits. Trailing zeros are not folded there (the value is the same; AddTermGeneral
// folds them when it next runs); whatever does not fit takes AddTermGeneral.
inline void ExactSum::AddTerm(size_t i, Int128 t, int e) {
  Int128& M = mantissa_[i];
  int16_t& E = exponent_[i];
  if (E != kInWide) {
    if (M == 0) {
      M = t;
      E = static_cast<int16_t>(e);
      return;
    }
    const int low = std::min<int>(e, E);
    const int shift_m = E - low, shift_t = e - low;  // one of them is 0
    const Int128 sign_m = M >> 127;
    const auto abs_m = static_cast<u128>((M ^ sign_m) - sign_m);
    if ((shift_m | shift_t) <= 62 && abs_m < (u128{1} << (126 - shift_m))) {
      // Multiplications by powers of two (no left shift of a negative number; neither
      // overflows, as checked above).
      M = M * (Int128{1} << shift_m) + t * (Int128{1} << shift_t);
      E = static_cast<int16_t>(low);
      return;
    }
  }
  AddTermGeneral(i, t, e);
}

// AddTerm's other cases: a wide coordinate; a narrow one aligned by longer shifts while its
// 126 bits hold the sum; else the coordinate moves to the wide form for good.
void ExactSum::AddTermGeneral(size_t i, Int128 t, int e) {
  if (exponent_[i] == kInWide) return AddWide(wide_[i], ToWide(t, e - kWideUnit));
  Int128& m = mantissa_[i];
  int exp = exponent_[i];  // m != 0: AddTerm took the empty coordinate
  // Align both to the smaller exponent; 126 bits keep the sum clear of the sign bit.
  const int shift = e >= exp ? e - exp : exp - e;
  const u128 moved = e >= exp ? Magnitude(t) : Magnitude(m);
  Int128 sum;
  if (shift > 126 - BitLength(moved) ||
      __builtin_add_overflow(e >= exp ? m : t, (e >= exp ? t : m) * (Int128{1} << shift), &sum)) {
    Wide w = ToWide(m, exp - kWideUnit);
    AddWide(w, ToWide(t, e - kWideUnit));
    wide_[i] = w;
    exponent_[i] = kInWide;
    m = 0;
    return;
  }
  m = sum;
  exp = std::min(e, exp);
  // Fold trailing zeros into the exponent, so later terms need shorter shifts.
  if (m != 0) {
    const auto lo = static_cast<uint64_t>(static_cast<u128>(m));
    const int tz = lo ? std::countr_zero(lo) : 64 + std::countr_zero(static_cast<uint64_t>(static_cast<u128>(m) >> 64));
    m >>= tz;
    exp += tz;
  }
  exponent_[i] = static_cast<int16_t>(exp);
}

Status ExactSum::CheckWeight(uint64_t weight) const {
  SHOAL_RETURN_IF_ERROR(WeightInRange(weight));
  if (weight > kMaxTotalWeight - weight_) return Status::InvalidArgument("the total weight would pass 2^63");
  return Status::Ok();
}

inline void ExactSum::AddValue(size_t i, float x, uint64_t weight) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t biased = (bits >> 23) & 0xff;
  uint64_t m = bits & 0x7fffff;
  if (biased) m |= 0x800000;
  if (m == 0) return;
  const int e = (biased ? static_cast<int>(biased) : 1) - 150;
  const Int128 mag = static_cast<Int128>(static_cast<u128>(m) * weight);  // < 2^64
  const Int128 neg = -static_cast<Int128>(bits >> 31);                     // 0 or -1
  const Int128 t = (mag ^ neg) - neg;
  AddTerm(i, t, e);
}

Status ExactSum::Add(std::span<const float> x, uint64_t weight) {
  SHOAL_RETURN_IF_ERROR(Check(x, size(), weight));
  SHOAL_RETURN_IF_ERROR(CheckWeight(weight));  // the total's room
  if (count_ == 0 && mantissa_.empty()) {
    single_.assign(x.begin(), x.end());
    single_weight_ = weight;
  } else {
    MakeExact();
    for (size_t i = 0; i < x.size(); ++i) AddValue(i, x[i], weight);
  }
  ++count_;
  weight_ += weight;
  return Status::Ok();
}

Status ExactSum::AddSparse(std::span<const uint32_t> indices, std::span<const float> values, uint64_t weight) {
  if (indices.size() != values.size())
    return Status::InvalidArgument(std::to_string(indices.size()) + " indices for " + std::to_string(values.size()) +
                                   " values");
  SHOAL_RETURN_IF_ERROR(CheckWeight(weight));
  for (size_t j = 0; j < indices.size(); ++j) {
    if (indices[j] >= size())
      return Status::InvalidArgument("index " + std::to_string(indices[j]) + " is outside the sum's " +
                                     std::to_string(size()));
    if (!std::isfinite(values[j])) return Status::InvalidArgument("value " + std::to_string(j) + " is not finite");
  }
  MakeExact();
  for (size_t j = 0; j < indices.size(); ++j) AddValue(indices[j], values[j], weight);
  ++count_;
  weight_ += weight;
  return Status::Ok();
}

// m * 2^e as two terms below 2^64: m = hi * 2^64 + lo, lo unsigned, hi signed (|hi| <= 2^63).
void ExactSum::AddExact(size_t i, Int128 m, int e) {
  const auto lo = static_cast<uint64_t>(static_cast<u128>(m));
  const Int128 hi = m >> 64;  // arithmetic: the floor
  if (lo) AddTerm(i, static_cast<Int128>(lo), e);
  if (hi) AddTerm(i, hi, e + 64);
}

// A wide value, limb by limb: five unsigned limbs and the signed top one.
void ExactSum::AddWideValue(size_t i, const Wide& w) {
  for (int k = 0; k < 5; ++k)
    if (w[k]) AddTerm(i, static_cast<Int128>(w[k]), kWideUnit + 64 * k);
  if (w[5]) AddTerm(i, static_cast<Int128>(static_cast<int64_t>(w[5])), kWideUnit + 320);
}

Status ExactSum::Merge(const ExactSum& other) {
  if (other.size() != size())
    return Status::InvalidArgument("a partial sum of " + std::to_string(other.size()) + " values, the sum " +
                                   std::to_string(size()));
  if (other.count_ == 0) return Status::Ok();
  if (other.weight_ > kMaxTotalWeight - weight_) return Status::InvalidArgument("the total weight would pass 2^63");
  MakeExact();
  if (other.single()) {
    for (size_t i = 0; i < n_; ++i) AddValue(i, other.single_[i], other.single_weight_);
  } else if (!other.mantissa_.empty()) {
    for (size_t i = 0; i < n_; ++i) {
      if (other.exponent_[i] == kInWide) {
        AddWideValue(i, other.wide_.at(i));
      } else if (other.mantissa_[i] != 0) {
        AddExact(i, other.mantissa_[i], other.exponent_[i]);
      }
    }
  }
  count_ += other.count_;
  weight_ += other.weight_;
  return Status::Ok();
}

double ExactSum::Value(size_t i) const {
  // + 0.0: a -0 update value is the exact form's +0.
  if (single()) return static_cast<double>(single_[i]) * static_cast<double>(single_weight_) + 0.0;
  if (mantissa_.empty()) return 0.0;
  if (exponent_[i] == kInWide) return WideToDouble(wide_.at(i));
  const Int128 m = mantissa_[i];
  if (m == 0) return 0.0;
  const double d = RoundToDouble(Magnitude(m), exponent_[i]);
  return m < 0 ? -d : d;
}

int ExactSum::Sign(size_t i) const {
  if (single()) return (single_[i] > 0.0f) - (single_[i] < 0.0f);
  if (mantissa_.empty()) return 0;
  if (exponent_[i] == kInWide) {
    const Wide& w = wide_.at(i);
    return WideNegative(w) ? -1 : (WideZero(w) ? 0 : 1);
  }
  return mantissa_[i] < 0 ? -1 : (mantissa_[i] > 0 ? 1 : 0);
}

void ExactSum::Mean(double scale, std::span<float> out) const {
  const double total = static_cast<double>(weight_);
  for (size_t i = 0; i < out.size() && i < size(); ++i)
    out[i] = weight_ ? static_cast<float>(Value(i) / total * scale) : 0.0f;
}

}  // namespace shoal::aggregator
