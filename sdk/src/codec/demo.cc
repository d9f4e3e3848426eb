// The "demo" preset (DeMo, Peng et al. 2024): "demo:chunk=C,topk=K,bits=B" stands for
//   dct:chunk=C | topk:k=K | (sign | int8 | bf16 | nothing, by B)
// i.e. the chunked DCT, the K largest coefficients of each chunk, and the values at B bits.
// Its chunk parameter is dct's (same range and default) and its topk parameter is topk's k
// (same range) with the preset's own default; the expanded stages are then canonicalized like
// any other (defaults filled in).
// Refuses a bits value that names no quantizer (kWidths).
#include <string>

#include "codec/stages.h"

namespace shoal::codec {
namespace {

struct Width {
  int64_t bits;
  std::string_view stage;  // "": the values travel as fp32
};
constexpr Width kWidths[] = {{1, "sign"}, {8, "int8"}, {16, "bf16"}, {32, ""}};

// "1, 8, 16 or 32", with the stage each picks when `stages`.
std::string WidthList(bool stages) {
  std::string s;
  for (size_t i = 0; i < std::size(kWidths); ++i) {
    s += (i == 0 ? "" : i + 1 == std::size(kWidths) ? " or " : ", ") + std::to_string(kWidths[i].bits);
    if (stages) s += " (" + std::string(kWidths[i].stage.empty() ? "fp32" : kWidths[i].stage) + ")";
  }
  return s;
}

std::span<const ParamDecl> Params() {
  static const std::string bits_meaning = "bits per value: " + WidthList(true);
  static const std::vector<ParamDecl> params = [] {
    ParamDecl chunk = *FindParam(kDctStage, "chunk");
    ParamDecl topk = *FindParam(kTopKStage, "k");
    topk.name = "topk";
    topk.has_default = true;
    topk.int_default = 8;
    topk.meaning = "DCT coefficients kept per chunk (topk's k)";
    return std::vector<ParamDecl>{chunk, topk,
                                  IntParam("bits", 1, kWidths[0].bits, std::end(kWidths)[-1].bits, bits_meaning)};
  }();
  return params;
}

StatusOr<std::vector<StageSpec>> Expand(const StageParams& p) {
  std::vector<StageSpec> out = {{"dct", {{"chunk", std::to_string(p.Int("chunk"))}}},
                                {"topk", {{"k", std::to_string(p.Int("topk"))}}}};
  for (const Width& w : kWidths) {
    if (w.bits != p.Int("bits")) continue;
    if (!w.stage.empty()) out.push_back({std::string(w.stage), {}});
    return out;
  }
  return Status::InvalidArgument("demo: bad value '" + std::to_string(p.Int("bits")) + "' for 'bits' (expected " +
                                 WidthList(false) + ")");
}

}  // namespace

constinit const PresetDecl kDemoPreset = {
    .name = "demo",
    .summary = "DeMo: dct | per-chunk topk | values at `bits` bits",
    .params = &Params,
    .expand = &Expand,
};

}  // namespace shoal::codec
