// The codec stages, one per file, each declaring itself once (registry.h) with its parameters,
// ranges and defaults: ef.cc, dct.cc, powersgd.cc, topk.cc, randk.cc, fp16.cc, bf16.cc,
// int8.cc, qsgd.cc, sign.cc, zstd.cc; demo.cc declares the "demo" preset. StagesHelp() prints
// every declaration. The Make* functions build one stage from a (not necessarily canonical)
// StageSpec, checking its parameters against the declaration first.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "codec/codec.h"
#include "codec/registry.h"

namespace shoal::codec {

extern const StageDecl kErrorFeedbackStage;
extern const StageDecl kDctStage;
extern const StageDecl kPowerSgdStage;
extern const StageDecl kTopKStage;
extern const StageDecl kRandKStage;
extern const StageDecl kFp16Stage;
extern const StageDecl kBf16Stage;
extern const StageDecl kInt8Stage;
extern const StageDecl kQsgdStage;
extern const StageDecl kSignStage;
extern const StageDecl kZstdStage;
extern const PresetDecl kDemoPreset;

inline StatusOr<std::unique_ptr<Transform>> MakeDct(const StageSpec& s) { return MakeStage<Transform>(kDctStage, s); }
inline StatusOr<std::unique_ptr<Transform>> MakePowerSgd(const StageSpec& s, const std::vector<TensorSpec>& layout) {
  return MakeStage<Transform>(kPowerSgdStage, s, layout);
}
inline StatusOr<std::unique_ptr<Selector>> MakeTopK(const StageSpec& s) { return MakeStage<Selector>(kTopKStage, s); }
inline StatusOr<std::unique_ptr<Selector>> MakeRandK(const StageSpec& s) { return MakeStage<Selector>(kRandKStage, s); }
inline StatusOr<std::unique_ptr<Quantizer>> MakeFp16(const StageSpec& s) { return MakeStage<Quantizer>(kFp16Stage, s); }
inline StatusOr<std::unique_ptr<Quantizer>> MakeBf16(const StageSpec& s) { return MakeStage<Quantizer>(kBf16Stage, s); }
inline StatusOr<std::unique_ptr<Quantizer>> MakeInt8(const StageSpec& s) { return MakeStage<Quantizer>(kInt8Stage, s); }
inline StatusOr<std::unique_ptr<Quantizer>> MakeQsgd(const StageSpec& s) { return MakeStage<Quantizer>(kQsgdStage, s); }
inline StatusOr<std::unique_ptr<Quantizer>> MakeSign(const StageSpec& s) { return MakeStage<Quantizer>(kSignStage, s); }

// Quantizer::Encode's refusal: InvalidArgument "value I is not finite" (ef.cc).
Status NotFinite(size_t index);

// Error feedback (stage "ef", ef.cc): the encoder keeps what its payloads lost and adds it to
// the next update. Two buffers: the residual, and the one the next residual is written into
// (Quantizer::EncodeWithFeedback, or x for pipelines that need it whole). Commit makes the
// second the residual, so an encode refused midway leaves the residual as it was.
class ErrorFeedback {
 public:
  // The residual the next update gets (size n after Reset(n)).
  std::span<const float> residual() const { return residual_; }
  // Where an encode writes the next residual; becomes residual() at Commit.
  std::span<float> next() { return next_; }
  void Commit() { residual_.swap(next_); }
  // A zero residual of n values.
  void Reset(size_t n) {
    residual_.assign(n, 0.0f);
    next_.assign(n, 0.0f);
  }
  // A residual restored from a checkpoint (its size is the caller's to check).
  void Restore(std::vector<float> residual) {
    residual_ = std::move(residual);
    next_.assign(residual_.size(), 0.0f);
  }

 private:
  std::vector<float> residual_, next_;
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

}  // namespace shoal::codec
