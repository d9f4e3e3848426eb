// Codec::Impl, shared by the pipeline's three files: codec.cc (building it from the stages a
// spec names, its state), encode.cc and decode.cc (the two directions of the payload format).
// spec.cc parses specs; each stage's declaration and factory are in its own file (registry.h).
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
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/bytes.h"
#include "codec/codec.h"
#include "codec/registry.h"
#include "codec/stages.h"

namespace shoal::codec {

inline constexpr uint8_t kFormatVersion = 1;
// Selected indices travel chunk-local (a count per chunk, then u8 or u16 offsets) for chunks
// of this many values; delta-coded varints otherwise.
inline constexpr size_t kChunkLocalMin = 32;
inline constexpr size_t kChunkLocalMax = 65536;


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
  // dst = the inverse transform of tensor t's coefficients; false when a value is not finite.
  bool InverseTensor(const Tensor& t, std::span<const float> coeffs, std::span<float> dst) const;
};

}  // namespace shoal::codec
