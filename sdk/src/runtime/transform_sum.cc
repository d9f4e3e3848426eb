#include "runtime/transform_sum.h"

#include <algorithm>

namespace shoal::runtime {

TransformSum::TransformSum(const codec::Codec& codec) : codec_(codec), sum_(codec.num_coefficients()) {}

Status TransformSum::Add(std::span<const uint8_t> payload, const codec::RoundContext& ctx, uint64_t weight) {
  SHOAL_RETURN_IF_ERROR(codec_.DecodeCoefficients(payload, ctx, &indices_, &values_));
  return sum_.AddSparse(indices_, values_, weight);
}

Status TransformSum::Mean(std::span<float> out) {
  if (count() == 0) {
    std::fill(out.begin(), out.end(), 0.0f);
    return Status::Ok();
  }
  coefficients_.resize(sum_.size());
  sum_.Mean(1.0, coefficients_);
  return codec_.InverseTransform(coefficients_, out);
}

}  // namespace shoal::runtime
