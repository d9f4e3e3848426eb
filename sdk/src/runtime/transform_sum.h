// TransformSum: the weighted mean of many updates of one codec whose pipeline ends in a linear
// transform (dct: DeMo's preset), kept in the transform domain and transformed back once.
//
// Algorithm (DeMo's reference does the same: it concatenates its workers' sparse DCT
// coefficients, scatters them into one tensor and inverts the DCT once). Each payload's
// coefficients (Codec::DecodeCoefficients: the selected ones, dequantized) go into an exact,
// order-independent sum (aggregator::ExactSum::AddSparse) with the update's weight; Mean()
// rounds each coefficient's exact weighted mean once to float and runs the codec's inverse
// transform on that vector. Decoding every update instead costs one inverse transform and one
// dense exact add per update; this costs sparse adds and one inverse transform in all.
//
// Result. Mean() is a pure function of the multiset of (payload, weight) pairs: every replica
// that adds the same updates, in any order, gets the same bits. It equals the mean of the
// decoded updates in exact arithmetic; in float it differs from Sum(n_k Decode(p_k)) / Sum(n_k)
// by the rounding of one inverse transform (the mean's coefficients are rounded once, then
// transformed, instead of each update being transformed, then summed exactly). For one update
// it equals Decode(p) value for value (x * w / w rounds back to x; a -0 may come out +0).
//
// Refuses (each with nothing added): a payload Codec::DecodeCoefficients refuses, a weight
// ExactSum refuses; Mean refuses (Corruption) a mean whose transform is not finite.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "aggregate/exact_sum.h"
#include "codec/codec.h"

namespace shoal::runtime {

class TransformSum {
 public:
  // `codec` must outlive this sum, and have linear_transform().
  explicit TransformSum(const codec::Codec& codec);

  // Adds an update of the round of `ctx` (every update of one sum must be of the same round).
  Status Add(std::span<const uint8_t> payload, const codec::RoundContext& ctx, uint64_t weight);
  // Empties the sum, keeping its memory: a sum reused step after step allocates nothing.
  void Clear() { sum_.Clear(); }
  uint64_t count() const { return sum_.count(); }
  uint64_t total_weight() const { return sum_.total_weight(); }
  // out (the layout's size) = the inverse transform of the weighted mean of the coefficients;
  // zeros when nothing was added.
  Status Mean(std::span<float> out);

 private:
  const codec::Codec& codec_;
  aggregator::ExactSum sum_;
  std::vector<uint32_t> indices_;  // scratch, reused
  std::vector<float> values_, coefficients_;
};

}  // namespace shoal::runtime
