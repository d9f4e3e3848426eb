// The codec pipeline: the payload format and Codec::Impl, built from the stages a spec names
// (spec.cc parses it; each stage's declaration and factory are in its own file, registry.h).
//
// Payload of a non-empty pipeline (all integers little-endian, varints LEB128):
//   u8     format version (kFormatVersion)
//   u8     number of wire stages, then one u8 StageId each, in pipeline order. Error feedback
//          is encoder-side state that does not change the format, so it is not listed: a
//          decoder with or without `ef` reads the same payload.
//   varint total number of floats of the layout (a cheap mismatch check)
//   body   (with a pack stage: the packed body, e.g. one zstd frame, nothing after it)
// Body, per tensor in layout order (tensors with no elements are skipped):
//   [varint count]                  only with a selector; must equal Selector::Count(m, chunk)
//   [indices]                       only with a selector whose indices are not implicit:
//       chunk-local (32 <= chunk <= 65536): per chunk, varint count then that many offsets
//                                   within the chunk (u8 when chunk <= 256, else u16),
//                                   strictly increasing
//       otherwise delta + varint:   idx[0], then idx[i] - idx[i-1] - 1
//   values                          Quantizer::Encode of the travelling values, or raw f32
// where m = Transform::NumCoefficients (or the tensor size), chunk = Transform::ChunkSize
// (0 without a transform). The empty pipeline's payload is the raw little-endian fp32 update.
#include "codec/codec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <variant>

#include "codec/bytes.h"
#include "codec/kernels.h"
#include "codec/registry.h"
#include "codec/stages.h"

namespace shoal::codec {

Shape2D ToShape2D(const TensorSpec& spec) {
  Shape2D s;
  if (spec.shape.empty()) return s;
  if (spec.shape.size() == 1) {
    s.cols = spec.shape[0];
    return s;
  }
  s.rows = spec.shape[0];
  s.cols = 1;
  for (size_t i = 1; i < spec.shape.size(); ++i) s.cols *= spec.shape[i];
  return s;
}

// Codec ---------------------------------------------------------------------------------------
namespace {

constexpr uint8_t kFormatVersion = 1;
constexpr size_t kChunkLocalMin = 32;
constexpr size_t kChunkLocalMax = 65536;

size_t VarintLen(uint64_t v) { return v < 0x80 ? 1 : 1 + VarintLen(v >> 7); }

}  // namespace

class Codec::Impl {
 public:
  struct Tensor {
    std::string name;
    Shape2D shape;
    size_t offset = 0, size = 0;
    size_t coeffs = 0;  // m
    size_t coeff_offset = 0;  // of its coefficients in the coefficient vector (DecodeCoefficients)
    size_t chunk = 0;
    size_t count = 0;   // travelling values (Selector::Count, or m)
  };

  std::string spec;
  std::vector<StageSpec> stages;
  std::vector<TensorSpec> layout;
  std::vector<Tensor> tensors;
  size_t total = 0;
  std::unique_ptr<ErrorFeedback> ef;
  const StageDecl* transform_decl = nullptr;  // to rebuild the transform on Reset
  StageSpec transform_spec;
  std::unique_ptr<Transform> transform;
  std::unique_ptr<Selector> selector;
  std::unique_ptr<Quantizer> quantizer;
  std::unique_ptr<Packer> packer;
  std::vector<uint8_t> wire_ids;
  size_t body_bound = 0;  // most bytes a valid body can have for this layout
  size_t num_coeffs = 0;  // the coefficient vector's length

  // Encoder scratch, kept across calls so that an encode allocates nothing once warm.
  struct Scratch {
    std::vector<float> coeffs, gathered, gathered_residual, decoded;
    std::vector<uint32_t> idx;
    std::vector<uint8_t> body;
  } scratch;

  bool dense() const { return !transform && !selector && !quantizer && !packer; }
  bool chunk_local(size_t chunk) const { return chunk >= kChunkLocalMin && chunk <= kChunkLocalMax; }

  Status Build();
  Status EncodeBody(std::span<const float> update, const RoundContext& ctx, ByteWriter* w);
  Status EncodeIndices(const Tensor& t, ByteWriter* w) const;
  Status EncodeValues(std::span<const float> update, std::span<const float> residual, const RoundContext& ctx,
                      size_t tensor_index, ByteWriter* w, std::span<float> next_residual) const;
  Status NotFiniteError(std::span<const float> update, const std::string& otherwise = "an update value is not finite") const;
  // A payload's body, after its header is checked (and unpacked into *unpacked with a pack
  // stage). Not for the empty pipeline.
  StatusOr<std::span<const uint8_t>> Body(std::span<const uint8_t> payload, std::vector<uint8_t>* unpacked) const;
  // Where DecodeBody puts the decoded coefficients instead of transforming them back.
  struct CoefficientsOut {
    std::vector<uint32_t>* indices;
    std::vector<float>* values;
  };
  // Decodes into `out`, or, with `coefficients`, lists the coefficients (out unused).
  Status DecodeBody(std::span<const uint8_t> body, const RoundContext& ctx, std::span<float> out,
                    const CoefficientsOut* coefficients = nullptr) const;
  Status DecodeIndices(ByteReader* r, const Tensor& t, std::vector<uint32_t>* idx) const;
};

Status Codec::Impl::Build() {
  for (const auto& st : stages) {
    const StageDecl* decl = FindStage(st.name);
    if (!decl) return Status::Internal("codec: no stage '" + st.name + "'");
    SHOAL_ASSIGN_OR_RETURN(StageParams params, StageParams::Parse(decl->name, decl->params, st));
    // Each factory fills the pipeline member of its kind.
    Status s = std::visit(
        [&](auto make) -> Status {
          auto built = make(params, layout);
          if (!built.ok()) return built.status();
          using T = typename std::remove_reference_t<decltype(*built)>::element_type;
          if constexpr (std::is_same_v<T, ErrorFeedback>) ef = std::move(built).value();
          if constexpr (std::is_same_v<T, Transform>) transform = std::move(built).value();
          if constexpr (std::is_same_v<T, Selector>) selector = std::move(built).value();
          if constexpr (std::is_same_v<T, Quantizer>) quantizer = std::move(built).value();
          if constexpr (std::is_same_v<T, Packer>) packer = std::move(built).value();
          return Status::Ok();
        },
        decl->factory);
    SHOAL_RETURN_IF_ERROR(s);
    if (decl->slot == Slot::kTransform) {
      transform_decl = decl;
      transform_spec = st;
    }
    if (decl->slot != Slot::kErrorFeedback) wire_ids.push_back(static_cast<uint8_t>(decl->id));
  }
  size_t offset = 0;
  body_bound = 0;
  num_coeffs = 0;
  for (const auto& ts : layout) {
    for (int64_t d : ts.shape) {
      if (d < 0) return Status::InvalidArgument("codec: tensor '" + ts.name + "' has a negative dimension");
    }
    Tensor t;
    t.name = ts.name;
    t.shape = ToShape2D(ts);
    t.offset = offset;
    t.size = static_cast<size_t>(ts.numel());
    offset += t.size;
    if (t.size > 0) {
      t.coeffs = transform ? transform->NumCoefficients(t.shape) : t.size;
      t.coeff_offset = num_coeffs;
      num_coeffs += t.coeffs;
      t.chunk = transform ? transform->ChunkSize(t.shape) : 0;
      if (t.coeffs >= (size_t{1} << 32)) {
        return Status::InvalidArgument("codec: tensor '" + ts.name + "' has too many coefficients for 32-bit indices");
      }
      t.count = selector ? selector->Count(t.coeffs, t.chunk) : t.coeffs;
      if (t.count > t.coeffs) return Status::Internal("codec: selector count exceeds the coefficients of '" + ts.name + "'");
      size_t b = 0;
      if (selector) {
        b += 10;
        if (!selector->implicit_indices()) {
          if (chunk_local(t.chunk)) {
            const size_t nchunks = (t.coeffs + t.chunk - 1) / t.chunk;
            b += nchunks * VarintLen(t.chunk) + t.count * (t.chunk <= 256 ? 1 : 2);
          } else {
            b += t.count * 5;
          }
        }
      }
      b += quantizer ? quantizer->MaxEncodedBytes(t.count) : 4 * t.count;
      body_bound += b;
    }
    tensors.push_back(std::move(t));
  }
  total = offset;
  if (ef) ef->Reset(total);
  return Status::Ok();
}

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
    if (transform) {
      transform->Inverse(t.shape, coeffs, dst);
      if (kernels::FirstNonFinite(dst) != kernels::kAllFinite) {
        return Status::Corruption("codec payload: tensor '" + t.name + "' decodes to a non-finite value");
      }
    }
  }
  if (!r.empty()) {
    return Status::Corruption("codec payload: " + std::to_string(r.remaining()) + " trailing bytes after the last tensor");
  }
  return Status::Ok();
}

Codec::Codec(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Codec::~Codec() = default;

StatusOr<std::unique_ptr<Codec>> Codec::Create(const std::string& spec, const std::vector<TensorSpec>& layout) {
  auto impl = std::make_unique<Impl>();
  SHOAL_ASSIGN_OR_RETURN(impl->stages, ParseSpec(spec));
  for (const auto& st : impl->stages) impl->spec += (impl->spec.empty() ? "" : "|") + st.ToString();
  if (impl->spec.empty()) impl->spec = "none";
  impl->layout = layout;
  Status s = impl->Build();
  if (!s.ok()) return s.WithContext("codec spec '" + spec + "'");
  return std::unique_ptr<Codec>(new Codec(std::move(impl)));
}

const std::string& Codec::spec() const { return impl_->spec; }
bool Codec::is_dense() const { return impl_->dense(); }
bool Codec::has_error_feedback() const { return impl_->ef != nullptr; }

std::string Codec::SecureSumRefusal() const {
  const Impl& m = *impl_;
  if (m.ef || m.transform || m.packer || (m.selector && !m.selector->implicit_indices()) ||
      (m.quantizer && m.quantizer->id() != StageId::kInt8))
    return "secure aggregation composes with --codec none, int8, randk:ratio=R and randk:ratio=R|int8, not '" +
           m.spec + "'";
  return {};
}

bool Codec::quantizes_int8() const { return impl_->quantizer && impl_->quantizer->id() == StageId::kInt8; }

std::vector<uint32_t> Codec::SharedCoordinates(const RoundContext& ctx) const {
  const Impl& m = *impl_;
  std::vector<uint32_t> out, idx;
  for (size_t ti = 0; ti < m.tensors.size(); ++ti) {
    const Impl::Tensor& t = m.tensors[ti];
    if (t.size == 0) continue;
    if (!m.selector) {
      for (size_t i = 0; i < t.size; ++i) out.push_back(static_cast<uint32_t>(t.offset + i));
      continue;
    }
    const std::vector<float> zeros(t.size, 0.0f);  // a shared-seed selector reads only the size
    idx.clear();
    m.selector->Select(zeros, t.chunk, ctx, ti, &idx);
    for (uint32_t i : idx) out.push_back(static_cast<uint32_t>(t.offset + i));
  }
  return out;
}
std::span<const float> Codec::residual() const { return impl_->ef ? impl_->ef->residual() : std::span<const float>(); }

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

bool Codec::linear_transform() const { return impl_->transform && impl_->transform->linear(); }
size_t Codec::num_coefficients() const { return impl_->num_coeffs; }

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
    const std::span<float> dst = out.subspan(t.offset, t.size);
    m.transform->Inverse(t.shape, coefficients.subspan(t.coeff_offset, t.coeffs), dst);
    if (kernels::FirstNonFinite(dst) != kernels::kAllFinite)
      return Status::Corruption("codec: tensor '" + t.name + "' transforms back to a non-finite value");
  }
  return Status::Ok();
}

std::vector<uint8_t> Codec::SaveState() const {
  const Impl& m = *impl_;
  ByteWriter w;
  w.PutVarint(1);
  const std::span<const float> r = residual();
  w.PutVarint(r.size());
  w.PutFloats(r);
  const std::vector<uint8_t> t = m.transform ? m.transform->SaveState() : std::vector<uint8_t>();
  w.PutVarint(t.size());
  w.PutBytes(t);
  return w.Release();
}

Status Codec::LoadState(std::span<const uint8_t> state) {
  Impl& m = *impl_;
  ByteReader r(state);
  uint64_t version = 0, count = 0, tlen = 0;
  SHOAL_RETURN_IF_ERROR(r.ReadVarint(&version, "codec state version"));
  if (version != 1) return Status::Corruption("codec state: version " + std::to_string(version) + ", expected 1");
  SHOAL_RETURN_IF_ERROR(r.ReadVarint(&count, "codec state residual count"));
  if (count != (m.ef ? m.total : 0))
    return Status::Corruption("codec state: a residual of " + std::to_string(count) + " values for " + m.spec);
  std::vector<float> residual;
  std::span<const uint8_t> tstate;
  SHOAL_RETURN_IF_ERROR(r.ReadFloats(count, &residual, "codec state residual"));
  SHOAL_RETURN_IF_ERROR(r.ReadVarint(&tlen, "codec state transform length"));
  SHOAL_RETURN_IF_ERROR(r.ReadBytes(tlen, &tstate, "codec state transform"));
  if (!r.empty()) return Status::Corruption("codec state: trailing bytes");
  if (m.transform) {
    SHOAL_RETURN_IF_ERROR(m.transform->LoadState(tstate));
  } else if (tlen != 0) {
    return Status::Corruption("codec state: transform state for " + m.spec + ", which has no transform");
  }
  if (m.ef) m.ef->Restore(std::move(residual));
  return Status::Ok();
}

void Codec::Reset() {
  Impl& m = *impl_;
  if (m.ef) m.ef->Reset(m.total);
  if (m.transform_decl) {  // a fresh transform has no per-tensor state (PowerSGD's Q)
    auto t = MakeStage<Transform>(*m.transform_decl, m.transform_spec, m.layout);
    if (t.ok()) m.transform = std::move(t).value();
  }
}

}  // namespace shoal::codec
