// Every codec's decoder on hostile payloads: the first byte picks a pipeline of kSpecs (each
// stage kind, with and without zstd and error feedback), the rest is the payload. A decoded
// update must be all finite; a refusal must say why.
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "codec/codec.h"
#include "fuzz.h"

namespace {

constexpr const char* kSpecs[] = {"none", "fp16", "bf16", "int8:chunk=7", "int8:stochastic=1", "qsgd:levels=16",
                                  "qsgd:levels=5|zstd", "ef|sign", "topk:ratio=0.05|int8",
                                  "ef|topk:ratio=0.01|int8|zstd", "topk:k=3", "randk:ratio=0.1|fp16",
                                  "dct:chunk=8|topk:k=4|sign", "demo:chunk=64,topk=8,bits=1",
                                  "demo:chunk=16,topk=4,bits=32|zstd", "powersgd:rank=2|bf16", "ef|powersgd:rank=1",
                                  "zstd"};
constexpr size_t kNumSpecs = sizeof(kSpecs) / sizeof(kSpecs[0]);

const std::vector<shoal::TensorSpec>& Layout() {
  static const std::vector<shoal::TensorSpec> layout = {
      {"w", {16, 24}}, {"b", {24}}, {"conv", {5, 3, 2}}, {"one", {1}}, {"big", {64, 64}}};
  return layout;
}

const shoal::codec::Codec& CodecFor(size_t i) {
  static std::unique_ptr<shoal::codec::Codec> codecs[kNumSpecs];
  if (!codecs[i]) {
    auto c = shoal::codec::Codec::Create(kSpecs[i], Layout());
    FUZZ_CHECK(c.ok());
    codecs[i] = std::move(*c);
  }
  return *codecs[i];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const shoal::codec::Codec& codec = CodecFor(data[0] % kNumSpecs);
  shoal::codec::RoundContext ctx;
  ctx.round = 3;
  ctx.shared_seed = 11;
  std::vector<float> out(shoal::LayoutSize(Layout()), 0.0f);
  shoal::Status s = codec.Decode(std::span<const uint8_t>(data + 1, size - 1), ctx, out);
  if (!s.ok()) {
    FUZZ_CHECK(!s.message().empty());
    return 0;
  }
  for (float x : out) FUZZ_CHECK(std::isfinite(x));
  return 0;
}
