// Ring all-reduce (Patarasuk & Yuan 2009; the NCCL/gloo/Horovod ring), transport-agnostic:
// the state of one member of one ring for one step. The peer runtime (ring.cc) carries the
// messages between members; tests wire N of these together in-process.
//
// Algorithm. N members in ring order, member r sends only to r + 1 and hears only from r - 1.
// The n values are cut into N balanced segments, segment k = [k n / N, (k + 1) n / N).
//   reduce-scatter, hops t = 0 .. N-2: r sends its partial sum of segment (r - t) mod N; on
//     receiving segment (r - 1 - t) mod N it adds its own values, which is what it sends at
//     hop t + 1. After hop N-2, r holds segment (r + 1) mod N summed over all N members.
//   all-gather, hops t = 0 .. N-2: r sends the reduced segment (r + 1 - t) mod N (at t = 0 its
//     own, encoded once; then the bytes it received, forwarded unchanged).
// Each member sends 2 (N-1) segments: 2 (N-1)/N of the model, the bandwidth optimum for an
// all-reduce, whatever N. Weights and weight x loss ride along as doubles.
//
// Every member ends with the same bits: each reduced segment is encoded once by its owner and
// everyone, the owner included, keeps the decoded bytes. With the dense codec ("none") the
// hops are exact fp32; with a quantizer ("int8", "bf16", "fp16") each reduce-scatter hop
// re-encodes a partial sum, so the error grows with N (one quantization per hop, as
// INTELLECT-1's int8 ring), while the replicas stay bit-identical.
//
// Pipelining. A segment travels in pieces of `piece_values` values (the last may be shorter),
// each encoded on its own: a member reduces piece j of a hop and sends piece j of its next hop
// as soon as it arrives, while piece j + 1 is still on the wire, so sending, receiving and
// reducing overlap along the ring. The pieces of one hop arrive in order (one sender, one
// connection); those of different hops may interleave. Every piece is computed from the same
// values by the same operations whatever the piece size: the sum does not depend on it, and
// is bit-identical to the unpipelined ring (one piece per segment) for codecs whose chunks
// divide the piece size (int8's chunk of 256 divides 65,536).
//
// Refuses (Receive): a phase, hop or piece that is not the next one of its hop, a segment or
// contributor count other than the hop's, a weight that is negative or not finite, a payload
// that does not decode to the piece's length.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "shoal/status.h"

namespace shoal::peer {

// The first and one-past-last value of segment k of n values cut into `members` segments.
inline std::pair<size_t, size_t> RingSegmentBounds(size_t n, size_t members, size_t k) {
  return {static_cast<size_t>(uint64_t{n} * k / members), static_cast<size_t>(uint64_t{n} * (k + 1) / members)};
}

// Encodes ring segments with a dense codec: one of "none", "bf16", "fp16", "int8[:...]" (each
// segment seen as one tensor). Others (top-k, error feedback, sign, ...) are refused: a
// partial sum has no stable coordinates to select, and no residual to feed back.
class SegmentCodec {
 public:
  static StatusOr<std::unique_ptr<SegmentCodec>> Create(const std::string& spec);
  const std::string& spec() const { return spec_; }
  StatusOr<std::vector<uint8_t>> Encode(std::span<const float> values);
  Status Decode(std::span<const uint8_t> payload, std::span<float> out);
  // inout[i] = decoded[i] + inout[i]: with the exact codec ("none") straight from the payload's
  // bytes, with no decoded copy in between.
  Status DecodeAdd(std::span<const uint8_t> payload, std::span<float> inout);
  // The empty pipeline ("none"): the payload is the raw fp32 values, decoded exactly.
  bool exact() const { return exact_; }

 private:
  StatusOr<codec::Codec*> For(size_t n);
  std::string spec_;
  bool exact_ = false;
  std::map<size_t, std::unique_ptr<codec::Codec>> by_length_;  // a few piece lengths
  std::vector<float> decoded_;                                  // DecodeAdd's scratch
};

// The bytes of one piece: encoded here (owned), or a view of the frame it arrived in, kept
// alive by the frame's owner, so a piece that travels in one chunk goes from the socket's
// buffer to the reduction (and, in the all-gather, on to the next member) without a copy.
class HopPayload {
 public:
  HopPayload() = default;
  HopPayload(std::vector<uint8_t> owned) : owned_(std::move(owned)) {}  // NOLINT: from Encode's bytes
  HopPayload(std::span<const uint8_t> view, std::shared_ptr<const void> keep) : view_(view), keep_(std::move(keep)) {}
  std::span<const uint8_t> bytes() const { return keep_ ? view_ : std::span<const uint8_t>(owned_); }
  operator std::span<const uint8_t>() const { return bytes(); }  // NOLINT: read where bytes are read
  size_t size() const { return bytes().size(); }

 private:
  std::vector<uint8_t> owned_;
  std::span<const uint8_t> view_;
  std::shared_ptr<const void> keep_;
};

// One piece of one hop, from a member to the next one.
struct RingHop {
  uint8_t phase = 0;  // 0 reduce-scatter, 1 all-gather
  uint32_t hop = 0;
  uint32_t segment = 0;
  uint32_t contributors = 0;
  double weight = 0.0;
  double loss = 0.0;  // weight x loss, summed
  HopPayload payload;
  uint32_t piece = 0;
};

class RingAllReduce {
 public:
  // Member `position` of a ring of `members` (>= 1), contributing `values` (already scaled by
  // its weight) with `weight` and `loss` (weight x training loss); segments travel in pieces
  // of `piece_values` (>= 1) values.
  RingAllReduce(size_t members, size_t position, std::vector<float> values, double weight, double loss,
                SegmentCodec* codec, size_t piece_values);

  // The pieces to send first (reduce-scatter hop 0); none for a ring of one, done at once.
  StatusOr<std::vector<RingHop>> Start();
  // Whether a piece of (phase, hop) numbered `piece` is the next one Receive takes for that
  // hop (a later one waits for its predecessors; an earlier one is a duplicate).
  bool Next(uint8_t phase, uint32_t hop, uint32_t piece) const;
  // Takes the previous member's next piece of a hop; returns the piece to send on, if any.
  StatusOr<std::optional<RingHop>> Receive(RingHop in);
  bool done() const { return done_; }

  // After done(): the sum of every member's values, and of their weights and losses.
  const std::vector<float>& sum() const { return values_; }
  double weight() const { return weight_; }
  double loss() const { return loss_; }

 private:
  size_t Segment(int64_t k) const;
  // The segment this member receives at (phase, hop).
  size_t SegmentAt(uint8_t phase, uint32_t hop) const;
  size_t Pieces(size_t segment) const;
  std::span<float> Values(size_t segment, uint32_t piece);

  size_t members_, position_, piece_values_;
  std::vector<float> values_;
  double own_weight_, own_loss_;
  double weight_ = 0.0, loss_ = 0.0;
  SegmentCodec* codec_;
  std::vector<uint32_t> received_[2];  // per phase and hop: pieces taken so far
  size_t pieces_left_ = 0;             // pieces still to receive, all hops of both phases
  bool done_ = false;
};

}  // namespace shoal::peer
