// The integer pieces ExactSum's arithmetic (exact_sum.cc) and its wire form (exact_sum_wire.cc)
// share: bit lengths and magnitudes of the 128-bit narrow form, and the 384-bit wide form's
// unit, addition and magnitude. Internal to aggregate/.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#include "aggregate/exact_sum.h"

namespace shoal::aggregator::exact {

using Wide = std::array<uint64_t, 6>;  // little-endian limbs, two's complement
inline constexpr int kWideUnit = -149;  // exponent of the wide form's least significant bit

// Bits needed for v (0 for 0).
inline int BitLength(UInt128 v) {
  const auto hi = static_cast<uint64_t>(v >> 64);
  return hi ? 128 - std::countl_zero(hi) : 64 - std::countl_zero(static_cast<uint64_t>(v));
}
inline UInt128 Magnitude(Int128 v) { return v < 0 ? -static_cast<UInt128>(v) : static_cast<UInt128>(v); }

inline void AddWide(Wide& acc, const Wide& x) {
  unsigned char carry = 0;
  for (int i = 0; i < 6; ++i) {
    const UInt128 s = static_cast<UInt128>(acc[i]) + x[i] + carry;
    acc[i] = static_cast<uint64_t>(s);
    carry = static_cast<unsigned char>(s >> 64);
  }
}

inline bool WideNegative(const Wide& w) { return (w[5] >> 63) != 0; }

// |w| (two's complement negation when negative: invert, add one).
inline Wide WideMagnitude(Wide w) {
  if (!WideNegative(w)) return w;
  for (auto& l : w) l = ~l;
  AddWide(w, {1, 0, 0, 0, 0, 0});
  return w;
}

}  // namespace shoal::aggregator::exact
