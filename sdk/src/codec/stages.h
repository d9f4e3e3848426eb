// Factories for the codec stages, one stage per file (dct.cc, powersgd.cc, topk.cc, randk.cc,
// fp16.cc, bf16.cc, int8.cc, qsgd.cc, sign.cc). Each validates its own parameters and
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
#pragma once

#include <memory>
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

}  // namespace shoal::codec
