// Factories for the codec stages, one stage per file (dct.cc, powersgd.cc, topk.cc, randk.cc,
// fp16.cc, bf16.cc, int8.cc, qsgd.cc, sign.cc, zstd.cc). Each validates its own parameters and
// returns InvalidArgument naming the stage and parameter on bad input. Parameters and
// defaults:
//   dct       chunk=64            DCT-II, orthonormal, per chunk; chunk side = largest divisor of
//                                 each dimension <= chunk (2-D chunks for matrices)
//   powersgd  rank=4              rank-r approximation of each matrix, warm-started Q; vectors dense
//   topk      ratio=0.01 | k=N    largest magnitudes, per tensor (or per chunk of k when the
//             approx=0|1          transform chunks); approx=1 samples a threshold
//   randk     ratio=0.01          coordinates drawn from the round's shared seed (not sent)
//   fp16, bf16                    round to nearest even
//   int8      chunk=256, stochastic=0|1   per-chunk absmax scale
//   qsgd      levels=16           unbiased stochastic quantization with s levels (per-tensor norm)
//   sign                          1 bit per value plus a per-tensor scale (mean |x|)
//   zstd      level=3             the whole body as one zstd frame
// and the encoder-side error feedback of "ef" (ef.cc).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "codec/codec.h"

namespace shoal::codec {

StatusOr<std::unique_ptr<Transform>> MakeDct(const StageSpec& spec);
StatusOr<std::unique_ptr<Transform>> MakePowerSgd(const StageSpec& spec, const std::vector<TensorSpec>& layout);
StatusOr<std::unique_ptr<Selector>> MakeTopK(const StageSpec& spec);
StatusOr<std::unique_ptr<Selector>> MakeRandK(const StageSpec& spec);
StatusOr<std::unique_ptr<Quantizer>> MakeFp16(const StageSpec& spec);
StatusOr<std::unique_ptr<Quantizer>> MakeBf16(const StageSpec& spec);
StatusOr<std::unique_ptr<Quantizer>> MakeInt8(const StageSpec& spec);
StatusOr<std::unique_ptr<Quantizer>> MakeQsgd(const StageSpec& spec);
StatusOr<std::unique_ptr<Quantizer>> MakeSign(const StageSpec& spec);

// Error feedback (stage "ef", ef.cc): the encoder keeps what its payloads lost and adds it to
// the next update.
class ErrorFeedback {
 public:
  // The residual the next update gets (size n after Reset(n)).
  std::span<const float> residual() const { return residual_; }
  // x[i] = fl(update[i] + residual[i]).
  void Apply(std::span<const float> update, std::vector<float>* x) const;
  // residual[i] = fl(x[i] - decoded[i]), decoded being exactly what a decoder reconstructs.
  void Update(std::span<const float> x, std::span<const float> decoded);
  // A zero residual of n values.
  void Reset(size_t n) { residual_.assign(n, 0.0f); }

 private:
  std::vector<float> residual_;
};

// The pack slot (zstd.cc): compresses the whole body of a payload after its header.
class Packer {
 public:
  virtual ~Packer() = default;
  virtual StageId id() const = 0;
  // Appends the packed `body` to *out.
  virtual Status Pack(std::span<const uint8_t> body, std::vector<uint8_t>* out) const = 0;
  // Unpacks `packed` (everything after the header) into *body; Corruption for anything that is
  // not exactly one well-formed unit or would unpack to more than `max_body` bytes.
  virtual Status Unpack(std::span<const uint8_t> packed, size_t max_body, std::vector<uint8_t>* body) const = 0;
};

StatusOr<std::unique_ptr<Packer>> MakeZstd(const StageSpec& spec);

}  // namespace shoal::codec
