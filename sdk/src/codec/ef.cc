// Error feedback (stage "ef", StageId::kErrorFeedback, slot error-feedback), after Seide et al.
// 2014 / Karimireddy et al. 2019: the encoder adds the residual it kept to the update,
// x = fl(update + residual), encodes x with the rest of the pipeline and keeps the new residual
// fl(x - d), d being exactly what a decoder reconstructs from the payload (the pipeline decodes
// its own body to get it). Nothing is lost over rounds: d + new residual == x exactly whenever
// each d[i] is 0 or within a factor 2 of x[i] (Sterbenz), otherwise up to half an ulp of the
// residual (codec.h, Codec::Encode).
// Wire: nothing. Error feedback is encoder-side state, not listed in the payload header, so a
// decoder with or without "ef" reads the same payload. With a dense rest (the spec "ef" alone)
// decoding is exact and the residual stays zero. Takes no parameters.
#include "codec/stages.h"

namespace shoal::codec {

constinit const StageDecl kErrorFeedbackStage = {
    .name = "ef", .id = StageId::kErrorFeedback, .slot = Slot::kErrorFeedback,
    .summary = "error feedback: what a payload lost is added to the next update",
    .params = {}, .factory = &BuildPlain<ErrorFeedback, ErrorFeedback>};

void ErrorFeedback::Apply(std::span<const float> update, std::vector<float>* x) const {
  x->resize(update.size());
  for (size_t i = 0; i < update.size(); ++i) (*x)[i] = update[i] + residual_[i];
}

void ErrorFeedback::Update(std::span<const float> x, std::span<const float> decoded) {
  for (size_t i = 0; i < residual_.size(); ++i) residual_[i] = x[i] - decoded[i];
}

}  // namespace shoal::codec
