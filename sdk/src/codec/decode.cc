// The pipeline's decoder: the payload format of codec_impl.h back into an update, or into
// the coefficients it carries (Codec::DecodeCoefficients). Hostile-input safe: every count,
// index and length is checked before use.
#include <algorithm>
#include <cstring>

#include "codec/codec_impl.h"
#include "codec/kernels.h"

namespace shoal::codec {

Status Codec::Impl::DecodeIndices(ByteReader* r, const Tensor& t, std::vector<uint32_t>* idx) const {
  idx->clear();
  idx->reserve(t.count);
  if (chunk_local(t.chunk)) {
    const size_t nchunks = (t.coeffs + t.chunk - 1) / t.chunk;
    const size_t width = t.chunk <= 256 ? 1 : 2;
    for (size_t c = 0; c < nchunks; ++c) {
      const size_t len = std::min(t.chunk, t.coeffs - c * t.chunk);
      uint64_t k;
      SHOAL_RETURN_IF_ERROR(r->ReadVarint(&k, "chunk index count"));
      if (k > len || k > t.count - idx->size()) {
        return Status::Corruption("codec payload: tensor '" + t.name + "' chunk " + std::to_string(c) + " claims " +
                                  std::to_string(k) + " indices");
      }
      std::span<const uint8_t> b;
      SHOAL_RETURN_IF_ERROR(r->ReadBytes(k * width, &b, "chunk-local indices"));
      int64_t prev = -1;
      for (size_t i = 0; i < k; ++i) {
        uint32_t local = b[i * width];
        if (width == 2) local |= static_cast<uint32_t>(b[i * width + 1]) << 8;
        if (local >= len || static_cast<int64_t>(local) <= prev) {
          return Status::Corruption("codec payload: tensor '" + t.name + "' has an out-of-range or unsorted index");
        }
        prev = local;
        idx->push_back(static_cast<uint32_t>(c * t.chunk + local));
      }
    }
    if (idx->size() != t.count) {
      return Status::Corruption("codec payload: tensor '" + t.name + "' has " + std::to_string(idx->size()) +
                                " indices, expected " + std::to_string(t.count));
    }
    return Status::Ok();
  }
  uint64_t next = 0;  // smallest index allowed next
  for (size_t i = 0; i < t.count; ++i) {
    uint64_t d;
    SHOAL_RETURN_IF_ERROR(r->ReadVarint(&d, "index delta"));
    if (d >= t.coeffs || next + d >= t.coeffs) {
      return Status::Corruption("codec payload: tensor '" + t.name + "' has an index out of range");
    }
    idx->push_back(static_cast<uint32_t>(next + d));
    next += d + 1;
  }
  return Status::Ok();
}

bool Codec::Impl::InverseTensor(const Tensor& t, std::span<const float> coeffs, std::span<float> dst) const {
  transform->Inverse(t.shape, coeffs, dst);
  return kernels::FirstNonFinite(dst) == kernels::kAllFinite;
}

Status Codec::Impl::DecodeBody(std::span<const uint8_t> body, const RoundContext& ctx, std::span<float> out,
                               const CoefficientsOut* coefficients) const {
  ByteReader r(body);
  std::vector<float> coeffs, vals;
  std::vector<uint32_t> idx;
  if (coefficients) {
    coefficients->indices->clear();
    coefficients->values->clear();
  }
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const Tensor& t = tensors[ti];
    if (t.size == 0) continue;
    std::span<float> dst = coefficients ? std::span<float>() : out.subspan(t.offset, t.size);
    std::span<float> target = dst;
    if (transform) {
      coeffs.assign(t.coeffs, 0.0f);
      target = coeffs;
    }
    std::span<float> values = target;
    if (selector) {
      uint64_t count;
      SHOAL_RETURN_IF_ERROR(r.ReadVarint(&count, "value count"));
      if (count != t.count) {
        return Status::Corruption("codec payload: tensor '" + t.name + "' carries " + std::to_string(count) +
                                  " values, expected " + std::to_string(t.count));
      }
      if (selector->implicit_indices()) {
        std::fill(target.begin(), target.end(), 0.0f);
        idx.clear();
        selector->Select(target, t.chunk, ctx, ti, &idx);
        if (idx.size() != t.count) return Status::Internal("codec: implicit selector count mismatch");
        for (size_t i = 0; i < idx.size(); ++i) {
          if (idx[i] >= t.coeffs || (i > 0 && idx[i] <= idx[i - 1])) return Status::Internal("codec: implicit selector indices invalid");
        }
      } else {
        SHOAL_RETURN_IF_ERROR(DecodeIndices(&r, t, &idx));
      }
      vals.resize(t.count);
      values = vals;
    }
    if (quantizer) {
      SHOAL_RETURN_IF_ERROR(quantizer->Decode(&r, values));
    } else {
      std::span<const uint8_t> b;
      SHOAL_RETURN_IF_ERROR(r.ReadBytes(values.size() * 4, &b, "fp32 values"));
      std::memcpy(values.data(), b.data(), b.size());
      if (kernels::FirstNonFinite(values) != kernels::kAllFinite)
        return Status::Corruption("codec payload: tensor '" + t.name + "' holds a non-finite value");
    }
    if (coefficients) {  // the values as they are, at their places in the coefficient vector
      const std::span<const float> v = selector ? std::span<const float>(vals) : std::span<const float>(target);
      for (size_t i = 0; i < v.size(); ++i)
        coefficients->indices->push_back(static_cast<uint32_t>(t.coeff_offset + (selector ? idx[i] : i)));
      coefficients->values->insert(coefficients->values->end(), v.begin(), v.end());
      continue;
    }
    if (selector) {
      if (!transform) std::fill(target.begin(), target.end(), 0.0f);
      for (size_t i = 0; i < idx.size(); ++i) target[idx[i]] = vals[i];
    }
    if (transform && !InverseTensor(t, coeffs, dst))
      return Status::Corruption("codec payload: tensor '" + t.name + "' decodes to a non-finite value");
  }
  if (!r.empty()) {
    return Status::Corruption("codec payload: " + std::to_string(r.remaining()) + " trailing bytes after the last tensor");
  }
  return Status::Ok();
}

Status Codec::Decode(std::span<const uint8_t> payload, const RoundContext& ctx, std::span<float> out) const {
  const Impl& m = *impl_;
  if (out.size() != m.total) {
    return Status::InvalidArgument("codec: output has " + std::to_string(out.size()) + " values, the layout " +
                                   std::to_string(m.total));
  }
  if (m.dense()) {
    if (payload.size() != m.total * 4) {
      return Status::Corruption("codec payload: dense payload has " + std::to_string(payload.size()) + " bytes, expected " +
                                std::to_string(m.total * 4));
    }
    std::memcpy(out.data(), payload.data(), payload.size());
    if (const size_t bad = kernels::FirstNonFinite(out); bad != kernels::kAllFinite)
      return Status::Corruption("codec payload: dense value " + std::to_string(bad) + " is not finite");
    return Status::Ok();
  }
  std::vector<uint8_t> unpacked;
  SHOAL_ASSIGN_OR_RETURN(std::span<const uint8_t> body, m.Body(payload, &unpacked));
  return m.DecodeBody(body, ctx, out);
}

StatusOr<std::span<const uint8_t>> Codec::Impl::Body(std::span<const uint8_t> payload,
                                                     std::vector<uint8_t>* unpacked) const {
  ByteReader r(payload);
  uint8_t version = 0, nstages = 0;
  SHOAL_RETURN_IF_ERROR(r.ReadU8(&version, "format version"));
  if (version != kFormatVersion) {
    return Status::Corruption("codec payload: format version " + std::to_string(version) + ", this build reads " +
                              std::to_string(kFormatVersion));
  }
  SHOAL_RETURN_IF_ERROR(r.ReadU8(&nstages, "stage count"));
  std::span<const uint8_t> ids;
  SHOAL_RETURN_IF_ERROR(r.ReadBytes(nstages, &ids, "stage ids"));
  if (!std::equal(ids.begin(), ids.end(), wire_ids.begin(), wire_ids.end())) {
    return Status::Corruption("codec payload: its stages differ from this codec's ('" + spec + "')");
  }
  uint64_t n;
  SHOAL_RETURN_IF_ERROR(r.ReadVarint(&n, "layout size"));
  if (n != total) {
    return Status::Corruption("codec payload: encodes " + std::to_string(n) + " values, the layout has " +
                              std::to_string(total));
  }
  std::span<const uint8_t> rest;
  SHOAL_RETURN_IF_ERROR(r.ReadBytes(r.remaining(), &rest, "body"));
  if (!packer) return rest;
  SHOAL_RETURN_IF_ERROR(packer->Unpack(rest, body_bound, unpacked));
  return std::span<const uint8_t>(*unpacked);
}

Status Codec::DecodeCoefficients(std::span<const uint8_t> payload, const RoundContext& ctx,
                                 std::vector<uint32_t>* indices, std::vector<float>* values) const {
  const Impl& m = *impl_;
  if (!m.transform) return Status::InvalidArgument("codec: '" + m.spec + "' has no transform");
  if (m.num_coeffs > (size_t{1} << 32))
    return Status::InvalidArgument("codec: " + std::to_string(m.num_coeffs) + " coefficients have no 32-bit places");
  std::vector<uint8_t> unpacked;
  SHOAL_ASSIGN_OR_RETURN(std::span<const uint8_t> body, m.Body(payload, &unpacked));
  const Impl::CoefficientsOut out{indices, values};
  return m.DecodeBody(body, ctx, {}, &out);
}

Status Codec::InverseTransform(std::span<const float> coefficients, std::span<float> out) const {
  const Impl& m = *impl_;
  if (!m.transform) return Status::InvalidArgument("codec: '" + m.spec + "' has no transform");
  if (coefficients.size() != m.num_coeffs || out.size() != m.total)
    return Status::InvalidArgument("codec: " + std::to_string(coefficients.size()) + " coefficients and " +
                                   std::to_string(out.size()) + " outputs, the layout's are " +
                                   std::to_string(m.num_coeffs) + " and " + std::to_string(m.total));
  for (const Impl::Tensor& t : m.tensors) {
    if (t.size == 0) continue;
    if (!m.InverseTensor(t, coefficients.subspan(t.coeff_offset, t.coeffs), out.subspan(t.offset, t.size)))
      return Status::Corruption("codec: tensor '" + t.name + "' transforms back to a non-finite value");
  }
  return Status::Ok();
}

}  // namespace shoal::codec
