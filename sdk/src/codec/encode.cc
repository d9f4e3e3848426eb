// The pipeline's encoder: an update into the payload format of codec_impl.h, with error
// feedback fused into selection and quantization where the stages allow.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "codec/codec_impl.h"
#include "codec/kernels.h"

namespace shoal::codec {

// The refusal of an update with a non-finite value (or sum with the residual), naming the
// first one: the encoders detect, this rescans for the index. `otherwise`: what to say when
// every input value is finite (a transform's coefficient overflowed).
Status Codec::Impl::NotFiniteError(std::span<const float> update, const std::string& otherwise) const {
  size_t bad = kernels::FirstNonFinite(update);
  if (bad == kernels::kAllFinite && ef) {
    const std::span<const float> r = ef->residual();
    for (size_t i = 0; i < update.size() && bad == kernels::kAllFinite; ++i)
      if (!std::isfinite(update[i] + r[i])) bad = i;
  }
  if (bad == kernels::kAllFinite) return Status::InvalidArgument("codec: " + otherwise);
  return Status::InvalidArgument("codec: update value " + std::to_string(bad) + " is not finite" +
                                 (ef ? " (after adding the error-feedback residual)" : ""));
}

// The travelling values of one tensor, with error feedback when next_residual is not empty
// (see Quantizer::EncodeWithFeedback). Without a quantizer they travel as raw f32, decoded
// exactly: their residual is fl(x - x) = +0.
Status Codec::Impl::EncodeValues(std::span<const float> update, std::span<const float> residual, const RoundContext& ctx,
                                 size_t tensor_index, ByteWriter* w, std::span<float> next_residual) const {
  if (quantizer) {
    return next_residual.empty() ? quantizer->Encode(update, ctx, tensor_index, w)
                                 : quantizer->EncodeWithFeedback(update, residual, ctx, tensor_index, w, next_residual);
  }
  // Raw values come only after a selector or transform, which had the whole x checked.
  std::memcpy(w->Extend(update.size() * 4), update.data(), update.size() * 4);
  std::fill(next_residual.begin(), next_residual.end(), 0.0f);
  return Status::Ok();
}

Status Codec::Impl::EncodeIndices(const Tensor& t, ByteWriter* w) const {
  const std::vector<uint32_t>& idx = scratch.idx;
  // A selector that breaks its contract is a bug: refuse rather than emit garbage.
  if (idx.size() != t.count) return Status::Internal("codec: selector returned a wrong count for '" + t.name + "'");
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] >= t.coeffs || (i > 0 && idx[i] <= idx[i - 1])) {
      return Status::Internal("codec: selector returned unsorted or out-of-range indices for '" + t.name + "'");
    }
  }
  w->PutVarint(idx.size());
  if (selector->implicit_indices()) return Status::Ok();
  if (chunk_local(t.chunk)) {
    const size_t nchunks = (t.coeffs + t.chunk - 1) / t.chunk;
    size_t p = 0;
    for (size_t c = 0; c < nchunks; ++c) {
      const size_t end = std::min(t.coeffs, (c + 1) * t.chunk);
      size_t q = p;
      while (q < idx.size() && idx[q] < end) ++q;
      w->PutVarint(q - p);
      for (; p < q; ++p) {
        const uint32_t local = idx[p] - static_cast<uint32_t>(c * t.chunk);
        if (t.chunk <= 256) {
          w->PutU8(static_cast<uint8_t>(local));
        } else {
          w->PutU16(static_cast<uint16_t>(local));
        }
      }
    }
    return Status::Ok();
  }
  uint64_t prev_plus1 = 0;
  for (uint32_t i : idx) {
    w->PutVarint(i - prev_plus1);
    prev_plus1 = uint64_t{i} + 1;
  }
  return Status::Ok();
}

// Error feedback, fused where it can be:
//  - quantizer only: per tensor, the quantizer reads update and residual and writes the next
//    residual in the pass that encodes (no x buffer, no decode);
//  - with a selector: x = update + residual into next(), written and checked by the selector
//    in its own pass (Selector::SelectSum); the unselected keep x as their residual (d = 0),
//    the selected get theirs from the quantizer's fused encode of the gathered values;
//  - with a transform (dct, powersgd): d needs the inverse transform, so the body is decoded.
// Without error feedback, finiteness is checked by the quantizer's own pass, or by one pass
// up front when a selector or transform reads the values first.
Status Codec::Impl::EncodeBody(std::span<const float> update, const RoundContext& ctx, ByteWriter* w) {
  auto& [coeffs, gathered, gathered_residual, decoded, idx, body] = scratch;
  const size_t body_start = w->size();
  std::span<const float> x = update;
  std::span<float> next = ef ? ef->next() : std::span<float>();
  const bool select_sum = ef && selector && !transform;  // the selector adds, tensor by tensor
  if (transform || (selector && !ef)) {
    const size_t bad = ef ? kernels::AddChecked(update, ef->residual(), next) : kernels::FirstNonFinite(update);
    if (bad != kernels::kAllFinite) return NotFiniteError(update);
  }
  if (ef && (transform || selector)) x = next;
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const Tensor& t = tensors[ti];
    if (t.size == 0) continue;
    std::span<const float> vals = x.subspan(t.offset, t.size);
    if (transform) {
      coeffs.resize(t.coeffs);  // Forward writes every coefficient
      transform->Forward(ti, t.shape, vals, coeffs);
      vals = coeffs;
    }
    if (selector) {
      idx.clear();
      if (!select_sum) {
        selector->Select(vals, t.chunk, ctx, ti, &idx);
      } else if (!selector->SelectSum(update.subspan(t.offset, t.size), ef->residual().subspan(t.offset, t.size),
                                      next.subspan(t.offset, t.size), t.chunk, ctx, ti, &idx)) {
        return NotFiniteError(update);
      }
      SHOAL_RETURN_IF_ERROR(EncodeIndices(t, w));
      gathered.resize(idx.size());
      constexpr size_t kAhead = 16;  // the selected are scattered: each a cache miss
      for (size_t i = 0; i < idx.size(); ++i) {
        if (i + kAhead < idx.size()) __builtin_prefetch(&vals[idx[i + kAhead]]);
        gathered[i] = vals[idx[i]];
      }
      vals = gathered;
    }
    Status s;
    if (!ef || transform) {
      s = EncodeValues(vals, {}, ctx, ti, w, {});
    } else if (selector) {
      gathered_residual.resize(gathered.size());
      s = EncodeValues(gathered, {}, ctx, ti, w, gathered_residual);
      float* r = next.data() + t.offset;  // holds x: the unselected keep it
      for (size_t i = 0; i < idx.size(); ++i) r[idx[i]] = gathered_residual[i];
    } else {
      s = EncodeValues(update.subspan(t.offset, t.size), ef->residual().subspan(t.offset, t.size), ctx, ti, w,
                       next.subspan(t.offset, t.size));
    }
    if (s.code() == StatusCode::kInvalidArgument) return NotFiniteError(update, "tensor '" + t.name + "': " + s.message());
    SHOAL_RETURN_IF_ERROR(s);
  }
  if (ef && transform) {
    // The new residual is x minus exactly what a decoder will reconstruct.
    decoded.resize(total);
    Status s = DecodeBody(std::span<const uint8_t>(w->bytes()).subspan(body_start), ctx, decoded);
    if (!s.ok()) return Status::Internal("codec: own payload does not decode: " + s.message());
    for (size_t i = 0; i < total; ++i) next[i] -= decoded[i];
  }
  if (ef) ef->Commit();
  return Status::Ok();
}

StatusOr<std::vector<uint8_t>> Codec::Encode(std::span<const float> update, const RoundContext& ctx) {
  std::vector<uint8_t> payload;
  SHOAL_RETURN_IF_ERROR(EncodeInto(update, ctx, &payload));
  return payload;
}

Status Codec::EncodeInto(std::span<const float> update, const RoundContext& ctx, std::vector<uint8_t>* payload) {
  Impl& m = *impl_;
  if (update.size() != m.total) {
    return Status::InvalidArgument("codec: update has " + std::to_string(update.size()) + " values, the layout " +
                                   std::to_string(m.total));
  }
  if (m.dense()) {  // with "ef" too: decoding is exact, the residual stays zero
    if (kernels::FirstNonFinite(update) != kernels::kAllFinite) return m.NotFiniteError(update);
    payload->resize(m.total * 4);
    std::memcpy(payload->data(), update.data(), payload->size());
    return Status::Ok();
  }
  ByteWriter w(std::move(*payload));
  w.Reserve(std::min(m.body_bound, m.total + size_t{1024}) + 64);
  w.PutU8(kFormatVersion);
  w.PutU8(static_cast<uint8_t>(m.wire_ids.size()));
  for (uint8_t id : m.wire_ids) w.PutU8(id);
  w.PutVarint(m.total);
  const size_t hdr = w.size();
  Status s = m.EncodeBody(update, ctx, &w);
  if (s.ok() && m.packer) {
    m.scratch.body.assign(w.bytes().begin() + static_cast<std::ptrdiff_t>(hdr), w.bytes().end());
    w.Truncate(hdr);
    s = m.packer->Pack(m.scratch.body, w.mutable_bytes());
  }
  *payload = w.Release();  // the buffer goes back to the caller, for the next encode
  return s;
}

}  // namespace shoal::codec
