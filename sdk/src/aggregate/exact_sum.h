// ExactSum: the weighted sum  V[i] = sum_k w_k * x_k[i]  of float vectors with integer weights,
// kept EXACTLY, so the result does not depend on the order of the Adds (the aggregate is
// bit-identical whatever order updates arrive in) and memory is O(model), not O(clients).
//
// Algorithm. A finite float is m * 2^e with |m| < 2^24 and e >= -149, so a term w * x with
// w <= kMaxWeight (2^40) is an integer T, |T| < 2^64, times 2^e. Each coordinate holds a
// signed 128-bit integer M and an exponent E (value M * 2^E, trailing zero bits of M folded
// into E). A term is aligned to the smaller exponent and added; while the coordinate's terms
// span less than ~60 binary orders of magnitude this never overflows. When it would (1e30
// next to 1e-30, or cancellation far below the running magnitude), the coordinate moves, for
// good, to a 384-bit two's-complement fixed-point integer with 2^-149 as its unit, kept in a
// side table: the total weight stays below 2^63, so |V| < 2^63 * 2^128 and 341 bits suffice.
//
// Reading. Value(i) is V[i] rounded once to the nearest double (ties to even), a function of
// the exact value only, so both representations give the same double. Mean() divides that
// by the total weight in double and rounds to float; Sign(i) is the exact sign of V[i].
//
// Refuses: a vector of the wrong length, a NaN or Inf element, a weight of 0 or above
// kMaxWeight, and a weight that would take the total past kMaxTotalWeight (each with
// InvalidArgument, the sum unchanged).
// One update. Until a second one arrives, the sum is that update and its weight, kept as they
// came (4 bytes a coordinate, no exact arithmetic): Value(i) is then double(x[i]) * weight, the
// correctly rounded product (IEEE multiplication of two exact doubles), the same double the
// exact form gives; the next Add moves it into the exact form.
// Memory: 18 bytes per coordinate (4 for a single update) plus 48 for each coordinate that
// moved to the wide form.
// Partial sums (hierarchical aggregation). Merge adds another sum exactly: a tier's partial
// sums merged give the bits the tier's updates added one by one give. Serialize writes the
// exact state (exact_sum_wire.cc: the layout, compressed with zstd) and Deserialize reads it
// back, refusing anything malformed or a value larger than its weight allows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "shoal/status.h"

namespace shoal::aggregator {

// GCC/Clang's 128-bit integers (__extension__: not ISO C++, which -Wpedantic would flag).
__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

class ExactSum {
 public:
  static constexpr uint64_t kMaxWeight = uint64_t{1} << 40;  // = protocol::kMaxExamples (limits.h)
  static constexpr uint64_t kMaxTotalWeight = uint64_t{1} << 63;

  explicit ExactSum(size_t n);

  // V += weight * x. All-or-nothing: an invalid x leaves the sum as it was.
  Status Add(std::span<const float> x, uint64_t weight);
  // V[indices[j]] += weight * values[j]: a sparse x (zero elsewhere), counted as one Add.
  // Refuses, as Add does, a weight out of range or a non-finite value, and an index >= size()
  // or a length mismatch; an index may repeat (its values add up).
  Status AddSparse(std::span<const uint32_t> indices, std::span<const float> values, uint64_t weight);
  // What Add refuses of one update, whatever the sum holds: a length other than n, a weight
  // outside [1, kMaxWeight], a value that is not finite. The accumulators that keep updates
  // instead of summing them (the robust rules) apply the same checks.
  static Status Check(std::span<const float> x, size_t n, uint64_t weight);

  // V += the other sum's V, exactly; the counts and weights add. Refuses (InvalidArgument, the
  // sum unchanged) another length or a total weight past kMaxTotalWeight.
  Status Merge(const ExactSum& other);
  // The exact state as bytes (exact_sum_wire.cc), and back. Deserialize refuses (Corruption,
  // with what is wrong) bytes that are not a sum of `n` coordinates written by Serialize, and
  // any coordinate larger than total_weight * 2^129 (no sum of valid updates is): a merged
  // hostile partial sum can then not overflow the wide form.
  std::vector<uint8_t> Serialize() const;
  static StatusOr<ExactSum> Deserialize(std::span<const uint8_t> bytes, size_t n);
  // The most bytes Serialize writes for n coordinates (each in the wide form).
  static size_t MaxSerializedBytes(size_t n);

  // Empties the sum, keeping its memory (a sum reused step after step allocates nothing).
  void Clear();

  size_t size() const { return n_; }
  uint64_t count() const { return count_; }          // successful Adds
  uint64_t total_weight() const { return weight_; }  // the sum of their weights
  size_t wide_coordinates() const { return wide_.size(); }

  double Value(size_t i) const;  // V[i], correctly rounded to double
  int Sign(size_t i) const;      // -1, 0 or +1: the sign of the exact V[i]
  // out[i] = float(Value(i) / total_weight() * scale); zeros when nothing was added.
  void Mean(double scale, std::span<float> out) const;

 private:
  using Wide = std::array<uint64_t, 6>;  // little-endian limbs, two's complement, unit 2^-149
  static constexpr int16_t kInWide = INT16_MIN;  // exponent_[i] marker: coordinate lives in wide_

  Status CheckWeight(uint64_t weight) const;         // range, and room in the total
  bool single() const { return count_ == 1 && !single_.empty(); }
  void MakeExact();                                  // moves a single update into the exact form
  void AddValue(size_t i, float x, uint64_t weight);  // V[i] += weight * x (x finite)
  void AddExact(size_t i, Int128 m, int e);            // V[i] += m * 2^e, any m
  void AddWideValue(size_t i, const Wide& w);          // V[i] += w
  void AddTerm(size_t i, Int128 t, int e);         // the common case, inlined into Add
  void AddTermGeneral(size_t i, Int128 t, int e);  // the rest

  size_t n_;
  std::vector<float> single_;  // the only update so far (see "One update"), else empty
  uint64_t single_weight_ = 0;
  std::vector<Int128> mantissa_;  // the exact form: empty until it is needed
  std::vector<int16_t> exponent_;
  std::unordered_map<size_t, Wide> wide_;
  uint64_t count_ = 0;
  uint64_t weight_ = 0;
};

}  // namespace shoal::aggregator
