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
// Refuses (Receive): a hop, phase or segment other than the one expected next, a contributor
// count that does not fit the hop, a weight that is negative or not finite, a payload that
// does not decode to the segment's length.
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

 private:
  StatusOr<codec::Codec*> For(size_t n);
  std::string spec_;
  std::map<size_t, std::unique_ptr<codec::Codec>> by_length_;  // a ring has two segment lengths at most
};

// One hop's message, from a member to the next one.
struct RingHop {
  uint8_t phase = 0;  // 0 reduce-scatter, 1 all-gather
  uint32_t hop = 0;
  uint32_t segment = 0;
  uint32_t contributors = 0;
  double weight = 0.0;
  double loss = 0.0;  // weight x loss, summed
  std::vector<uint8_t> payload;
};

class RingAllReduce {
 public:
  // Member `position` of a ring of `members` (>= 1), contributing `values` (already scaled by
  // its weight) with `weight` and `loss` (weight x training loss).
  RingAllReduce(size_t members, size_t position, std::vector<float> values, double weight, double loss,
                SegmentCodec* codec);

  // The hop to send first (reduce-scatter hop 0); none for a ring of one, which is done at once.
  StatusOr<std::optional<RingHop>> Start();
  // The (phase, hop) Receive expects next.
  std::pair<uint8_t, uint32_t> expecting() const { return {phase_, hop_}; }
  // Takes the previous member's next hop; returns the hop to send on, if any.
  StatusOr<std::optional<RingHop>> Receive(const RingHop& in);
  bool done() const { return done_; }

  // After done(): the sum of every member's values, and of their weights and losses.
  const std::vector<float>& sum() const { return values_; }
  double weight() const { return weight_; }
  double loss() const { return loss_; }

 private:
  size_t Segment(int64_t k) const;
  std::span<float> Values(size_t segment);

  size_t members_, position_;
  std::vector<float> values_;
  double own_weight_, own_loss_;
  double weight_ = 0.0, loss_ = 0.0;
  SegmentCodec* codec_;
  uint8_t phase_ = 0;
  uint32_t hop_ = 0;
  bool done_ = false;
};

}  // namespace shoal::peer
