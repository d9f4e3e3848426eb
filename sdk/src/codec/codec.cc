// The codec pipeline: Codec::Impl built from the stages a spec names, the Codec's accessors
// and its state (checkpoints, Reset). The payload format is in codec_impl.h; encode.cc and
// decode.cc are its two directions.
#include "codec/codec.h"

#include <type_traits>
#include <variant>

#include "codec/codec_impl.h"

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

namespace {

size_t VarintLen(uint64_t v) { return v < 0x80 ? 1 : 1 + VarintLen(v >> 7); }

}  // namespace

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


bool Codec::linear_transform() const { return impl_->transform && impl_->transform->linear(); }
size_t Codec::num_coefficients() const { return impl_->num_coeffs; }

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

StatusOr<bool> Codec::ReturnToResidual(std::span<const uint8_t> payload, const RoundContext& ctx) {
  Impl& m = *impl_;
  if (!m.ef) return false;
  std::vector<float> sent(m.total, 0.0f);
  SHOAL_RETURN_IF_ERROR(Decode(payload, ctx, sent));
  const std::span<const float> r = m.ef->residual();
  for (size_t i = 0; i < sent.size(); ++i) sent[i] += r[i];
  m.ef->Restore(std::move(sent));
  return true;
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
