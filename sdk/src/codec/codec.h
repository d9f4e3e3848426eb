// Update compression (DESIGN.md §2, §3, §6): a pipeline of stages declared by a spec string,
//   ef | transform | select | quantize | zstd        (each slot optional, in this order)
// e.g. "bf16", "int8", "qsgd:levels=16", "ef|topk:ratio=0.01|int8", "ef|sign",
// "ef|powersgd:rank=4", "demo:chunk=64,topk=8,bits=1" (a preset: dct + per-chunk top-k + sign).
// The Codec encodes a whole update (a flat arena in layout order) into one byte payload and
// decodes it back. Decoding is hostile-input safe (every count, index and length is checked
// before use; NaN/Inf scales are refused) and deterministic: the same payload decodes to the
// same bits on every run and machine.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/arena.h"
#include "shoal/status.h"

namespace shoal::codec {

// Stage ids are part of the wire format (they appear in payload headers): never renumber.
enum class StageId : uint8_t {
  kErrorFeedback = 1,
  kDct = 2,
  kPowerSgd = 3,
  kTopK = 4,
  kRandK = 5,
  kFp16 = 6,
  kBf16 = 7,
  kInt8 = 8,
  kQsgd = 9,
  kSign = 10,
  kZstd = 11,
};

// Randomness shared by the parties of one round. Everything a decoder needs beyond the
// payload comes from here, so the aggregator and every client agree.
struct RoundContext {
  uint64_t round = 0;
  uint64_t shared_seed = 0;  // same for every client of a round (random-k coordinates)
  uint64_t private_seed = 0; // this encoder's own randomness (QSGD, stochastic rounding)
};

// How codecs see one tensor: a matrix rows x cols (a vector is 1 x n; higher-rank tensors are
// viewed as shape[0] x product(rest)).
struct Shape2D {
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t size() const { return rows * cols; }
};
Shape2D ToShape2D(const TensorSpec& spec);

// One parsed stage: name and key=value parameters, in spec order.
struct StageSpec {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;

  // The value of `key`, or nullptr when absent. (Typed, range-checked values: StageParams in
  // registry.h, against the stage's declaration.)
  const std::string* Find(std::string_view key) const;
  // "name" or "name:k=v,k=v".
  std::string ToString() const;
};
// Parses and validates a spec (grammar above; spec.cc): unknown stage, unknown or malformed parameter,
// a stage in the wrong slot or twice are InvalidArgument errors that name the culprit.
// "none" or "" is the empty pipeline (dense fp32).
// The result is canonical: presets expanded ("demo:chunk=64,topk=8,bits=1" becomes
// dct:chunk=64 | topk:k=8,approx=0 | sign), every parameter of a stage present (defaults filled
// in) in a fixed order, numbers in shortest form. Joining the stages' ToString() with '|'
// gives Codec::spec(), and parsing that again gives the same stages.
StatusOr<std::vector<StageSpec>> ParseSpec(const std::string& spec);
// The stage and preset names of `spec` as written (a preset not expanded), in order; empty for
// "none" or "". Syntax only: the errors of ParseSpec's first step.
StatusOr<std::vector<std::string>> SpecNames(const std::string& spec);
// The demo preset encodes the momentum DeMo's client optimizer extracts (the optimizer keeps
// what per-chunk top-k leaves out). Used for anything else without an `ef` stage, top-k drops
// most of every update for good and training crawls without a word. Returns InvalidArgument
// naming both fixes when `spec` is such a pairing with `optimizer` (`demo_flags`: what to pass,
// e.g. "--client-optimizer demo --strategy demo"); OK otherwise, and for a malformed spec
// (ParseSpec reports that).
Status CheckDemoPresetPairing(const std::string& spec, const std::string& optimizer, const std::string& demo_flags);

// Stage interfaces --------------------------------------------------------------------------
// Transforms map a tensor to coefficients and back. Forward may keep per-tensor state
// (PowerSGD's warm-started Q); Inverse must be a pure function of its inputs.
class Transform {
 public:
  virtual ~Transform() = default;
  virtual StageId id() const = 0;
  // Number of coefficients Forward produces for a tensor of this shape.
  virtual size_t NumCoefficients(Shape2D shape) const = 0;
  // Coefficients are grouped in chunks of this many (per-chunk selection); 0 = no chunking.
  virtual size_t ChunkSize(Shape2D shape) const { return 0; }
  // Writes every one of the NumCoefficients(shape) coefficients.
  virtual void Forward(size_t tensor_index, Shape2D shape, std::span<const float> in, std::span<float> coeffs) = 0;
  virtual void Inverse(Shape2D shape, std::span<const float> coeffs, std::span<float> out) const = 0;
  // Whether Inverse is linear in the coefficients (up to rounding): a sum of updates may then
  // be kept in the transform domain and transformed back once (Codec::DecodeCoefficients).
  virtual bool linear() const { return false; }
  // The per-tensor state Forward keeps (PowerSGD's Q), for checkpoints; empty when stateless.
  // LoadState refuses (Corruption) what SaveState of the same stage could not have written.
  virtual std::vector<uint8_t> SaveState() const { return {}; }
  virtual Status LoadState(std::span<const uint8_t> state) {
    return state.empty() ? Status::Ok() : Status::Corruption("codec: this transform keeps no state");
  }
};

// Selectors pick which coefficients travel. Indices come out sorted ascending.
class Selector {
 public:
  virtual ~Selector() = default;
  virtual StageId id() const = 0;
  // True when the decoder can regenerate the indices itself (random-k from the shared seed),
  // so they are not sent.
  virtual bool implicit_indices() const { return false; }
  // chunk > 0: select within each chunk of `chunk` values (the last may be shorter).
  virtual void Select(std::span<const float> values, size_t chunk, const RoundContext& ctx, size_t tensor_index,
                      std::vector<uint32_t>* indices) const = 0;
  // Error feedback fused into selection: writes x[i] = fl(a[i] + b[i]) and returns in
  // *indices what Select(x) would. Returns false (x and *indices unspecified) when some x[i] is
  // not finite. The default adds in one pass, then selects; top-k folds the sum into the pass
  // that collects its candidates.
  virtual bool SelectSum(std::span<const float> a, std::span<const float> b, std::span<float> x, size_t chunk,
                         const RoundContext& ctx, size_t tensor_index, std::vector<uint32_t>* indices) const;
  // How many indices Select returns for n values (decoders check counts against it).
  virtual size_t Count(size_t n, size_t chunk) const = 0;
};

// Quantizers turn the travelling values into bytes and back.
class ByteWriter;
class ByteReader;
class Quantizer {
 public:
  virtual ~Quantizer() = default;
  virtual StageId id() const = 0;
  // Appends the encoding of `values`. Checks finiteness in its own pass over the values:
  // InvalidArgument "value I is not finite" (I within `values`, the first such) when one is
  // not, the bytes appended then unspecified. Beyond a format's range it saturates.
  virtual Status Encode(std::span<const float> values, const RoundContext& ctx, size_t tensor_index,
                        ByteWriter* out) const = 0;
  // Error feedback fused into encoding: encodes x, x[i] = fl(update[i] + residual[i]) (or
  // x = update when `residual` is empty), exactly as Encode(x) would, and writes the new
  // residual next_residual[i] = fl(x[i] - d[i]), d being exactly what Decode returns for the
  // bytes appended. No decode pass and no x buffer where a stage overrides it (int8, sign);
  // the default materializes x in next_residual, encodes it and decodes its own bytes.
  // next_residual may alias `update` only when `residual` is empty. Errors as Encode's, for x;
  // next_residual is then unspecified.
  virtual Status EncodeWithFeedback(std::span<const float> update, std::span<const float> residual,
                                    const RoundContext& ctx, size_t tensor_index, ByteWriter* out,
                                    std::span<float> next_residual) const;
  // Reads exactly values.size() values; Corruption on truncated or invalid input (NaN scale).
  // On success every decoded value is finite.
  virtual Status Decode(ByteReader* in, std::span<float> values) const = 0;
  // The most bytes Encode writes for n values (bounds zstd frames and allocations on decode).
  virtual size_t MaxEncodedBytes(size_t n) const = 0;
};

// The pipeline ------------------------------------------------------------------------------
class Codec {
 public:
  // Builds the pipeline for `spec` over a model with `layout`.
  static StatusOr<std::unique_ptr<Codec>> Create(const std::string& spec, const std::vector<TensorSpec>& layout);
  ~Codec();

  // The canonical spec (parameters with their defaults filled in).
  const std::string& spec() const;
  bool is_dense() const;            // the empty pipeline: payload = raw little-endian fp32
  bool has_error_feedback() const;  // "ef" alone is dense: decoding is exact, the residual stays 0
  // Secure aggregation sums integers, so it takes over quantization and can keep only what
  // every client selects alike: it composes with the empty pipeline, a shared-seed selector
  // (randk), int8, and randk|int8. Empty when this codec is one of those, else why not.
  std::string SecureSumRefusal() const;
  bool quantizes_int8() const;
  // The coordinates (layout order, ascending) a shared-seed selector keeps in the round of
  // `ctx`: every coordinate without a selector.
  std::vector<uint32_t> SharedCoordinates(const RoundContext& ctx) const;
  // The error-feedback residual the next Encode adds (layout-sized; empty without ef).
  std::span<const float> residual() const;

  // Encodes one update (InvalidArgument on a size mismatch or a non-finite value). With error
  // feedback, x = fl(update + residual) is encoded and the new residual is fl(x - d), where d
  // is exactly what Decode returns for the payload. So d + new residual == x holds exactly
  // whenever each d[i] is 0 or within a factor 2 of x[i] (Sterbenz): unselected coordinates,
  // fp32 values, bf16, fp16 within +-65504, deterministic int8. Otherwise (sign, QSGD, stochastic int8) the
  // error is at most half an ulp of the residual: |d + r' - x| <= 2^-24 |x - d| per value.
  StatusOr<std::vector<uint8_t>> Encode(std::span<const float> update, const RoundContext& ctx);
  // Encode into *payload, replacing its contents and reusing its capacity: an encoder that
  // passes back the same vector each round allocates nothing once warm. On error the residual
  // is unchanged and *payload unspecified.
  Status EncodeInto(std::span<const float> update, const RoundContext& ctx, std::vector<uint8_t>* payload);
  // Decodes a payload into `out` (size = the layout's). Never reads outside `payload`.
  Status Decode(std::span<const uint8_t> payload, const RoundContext& ctx, std::span<float> out) const;
  // Decoding in the transform domain, for the sum of many updates (runtime/transform_sum.h):
  // DeMo's reference sums its workers' sparse DCT coefficients and transforms back once, where
  // decoding each update would run one inverse transform per update.
  // Whether this pipeline has a linear transform (dct), so that its updates can be summed so.
  bool linear_transform() const;
  // The length of the coefficient vector: each tensor's Transform::NumCoefficients, in layout
  // order (the layout's size without a transform).
  size_t num_coefficients() const;
  // The coefficients `payload` carries: their places in the coefficient vector (ascending) and
  // their decoded values, replacing the vectors' contents; every other coefficient is 0. The
  // checks are Decode's (Corruption for a malformed payload, a non-finite value) but for the
  // inverse transform's finiteness, which InverseTransform checks; so
  //   Decode(p) == InverseTransform(the coefficients of p, zeros elsewhere)   bit for bit.
  // InvalidArgument without a transform, or for a vector past 2^32 places (they are 32-bit).
  Status DecodeCoefficients(std::span<const uint8_t> payload, const RoundContext& ctx, std::vector<uint32_t>* indices,
                            std::vector<float>* values) const;
  // out = the inverse transform of a whole coefficient vector (num_coefficients() values),
  // tensor by tensor as Decode runs it. InvalidArgument for the wrong sizes or a pipeline
  // without a transform; Corruption when a result is not finite.
  Status InverseTransform(std::span<const float> coefficients, std::span<float> out) const;
  // Drops error-feedback residuals and transform state (e.g. after a model resync).
  void Reset();
  // For an update this encoder encoded that was never aggregated (lost, late, refused): adds
  // what its payload carried, Decode(payload, ctx), back into the residual, so the next
  // update carries that mass (then residual' = x of that encode, exactly where d + r' == x).
  // False, the residual untouched, without error feedback: nothing keeps the mass. Errors
  // are Decode's (and leave the residual as it was).
  StatusOr<bool> ReturnToResidual(std::span<const uint8_t> payload, const RoundContext& ctx);
  // The encoder's state (the error-feedback residual, the transform's state) for a checkpoint,
  // so that a resumed encoder continues bit-identically: version 1, then the residual (varint
  // count, little-endian floats), then the transform's state (varint length, bytes). LoadState
  // refuses, with Corruption and the state unchanged, a blob of another version or layout.
  std::vector<uint8_t> SaveState() const;
  Status LoadState(std::span<const uint8_t> state);

  class Impl;

 private:
  explicit Codec(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Stage names this build can decode (sent at Hello for negotiation), from the registry.
std::vector<std::string> SupportedStages();

}  // namespace shoal::codec
