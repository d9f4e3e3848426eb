// Error feedback (stage "ef", StageId::kErrorFeedback, slot error-feedback), after Seide et al.
// 2014 / Karimireddy et al. 2019: the encoder adds the residual it kept to the update,
// x = fl(update + residual), encodes x with the rest of the pipeline and keeps the new residual
// fl(x - d), d being exactly what a decoder reconstructs from the payload. Fused (issue 18): the
// quantizer computes x and the new residual in the pass that encodes, from the values it
// writes (Quantizer::EncodeWithFeedback; int8 and sign have fused bodies, the others the
// default below, which decodes its own bytes), and top-k computes x in the pass that collects
// its candidates (Selector::SelectSum); only a transform's pipeline decodes its body. Nothing
// is lost over rounds: d + new residual == x exactly whenever each d[i] is 0 or within a
// factor 2 of x[i] (Sterbenz), otherwise up to half an ulp of the residual (codec.h,
// Codec::Encode).
// Wire: nothing. Error feedback is encoder-side state, not listed in the payload header, so a
// decoder with or without "ef" reads the same payload. With a dense rest (the spec "ef" alone)
// decoding is exact and the residual stays zero. Takes no parameters.
#include <algorithm>
#include <string>
#include <vector>

#include "codec/bytes.h"
#include "codec/kernels.h"
#include "codec/stages.h"

namespace shoal::codec {

constinit const StageDecl kErrorFeedbackStage = {
    .name = "ef", .id = StageId::kErrorFeedback, .slot = Slot::kErrorFeedback,
    .summary = "error feedback: what a payload lost is added to the next update",
    .params = {}, .factory = &BuildPlain<ErrorFeedback, ErrorFeedback>};

Status NotFinite(size_t index) { return Status::InvalidArgument("value " + std::to_string(index) + " is not finite"); }

bool Selector::SelectSum(std::span<const float> a, std::span<const float> b, std::span<float> x, size_t chunk,
                         const RoundContext& ctx, size_t tensor_index, std::vector<uint32_t>* indices) const {
  if (kernels::AddChecked(a, b, x) != kernels::kAllFinite) return false;
  Select(x, chunk, ctx, tensor_index, indices);
  return true;
}

// The unfused path, for quantizers without a fused body: x into next_residual, Encode, decode
// the bytes just written, subtract.
Status Quantizer::EncodeWithFeedback(std::span<const float> update, std::span<const float> residual,
                                     const RoundContext& ctx, size_t tensor_index, ByteWriter* out,
                                     std::span<float> next_residual) const {
  if (!residual.empty()) {
    if (const size_t bad = kernels::AddChecked(update, residual, next_residual); bad != kernels::kAllFinite)
      return NotFinite(bad);
  } else if (next_residual.data() != update.data()) {
    std::copy(update.begin(), update.end(), next_residual.begin());
  }
  const size_t start = out->size();
  SHOAL_RETURN_IF_ERROR(Encode(next_residual, ctx, tensor_index, out));
  std::vector<float> decoded(next_residual.size());
  ByteReader r(std::span<const uint8_t>(out->bytes()).subspan(start));
  if (Status s = Decode(&r, decoded); !s.ok()) return Status::Internal("codec: own payload does not decode: " + s.message());
  for (size_t i = 0; i < decoded.size(); ++i) next_residual[i] -= decoded[i];
  return Status::Ok();
}

}  // namespace shoal::codec
