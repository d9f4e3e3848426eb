#include "runtime/peer/ring_allreduce.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

namespace shoal::peer {

StatusOr<std::unique_ptr<SegmentCodec>> SegmentCodec::Create(const std::string& spec) {
  SHOAL_ASSIGN_OR_RETURN(auto stages, codec::ParseSpec(spec));
  for (const auto& s : stages)
    if (s.name != "bf16" && s.name != "fp16" && s.name != "int8" && s.name != "zstd")
      return Status::InvalidArgument("codec '" + spec + "' cannot carry a ring all-reduce's partial sums: use none, bf16, "
                                     "fp16 or int8 (a stage like '" + s.name + "' needs the all-gather modes)");
  auto c = std::make_unique<SegmentCodec>();
  c->spec_ = spec;
  c->exact_ = stages.empty();
  return c;
}

StatusOr<codec::Codec*> SegmentCodec::For(size_t n) {
  auto it = by_length_.find(n);
  if (it == by_length_.end()) {
    SHOAL_ASSIGN_OR_RETURN(auto c, codec::Codec::Create(spec_, {TensorSpec{"segment", {static_cast<int64_t>(n)}}}));
    it = by_length_.emplace(n, std::move(c)).first;
  }
  return it->second.get();
}

StatusOr<std::vector<uint8_t>> SegmentCodec::Encode(std::span<const float> values) {
  if (values.empty()) return std::vector<uint8_t>();
  SHOAL_ASSIGN_OR_RETURN(codec::Codec * c, For(values.size()));
  return c->Encode(values, codec::RoundContext{});
}

Status SegmentCodec::Decode(std::span<const uint8_t> payload, std::span<float> out) {
  if (out.empty())
    return payload.empty() ? Status::Ok() : Status::InvalidArgument("an empty segment came with a payload");
  SHOAL_ASSIGN_OR_RETURN(codec::Codec * c, For(out.size()));
  return c->Decode(payload, codec::RoundContext{}, out);
}

Status SegmentCodec::DecodeAdd(std::span<const uint8_t> payload, std::span<float> inout) {
  if (!exact()) {
    decoded_.resize(inout.size());
    SHOAL_RETURN_IF_ERROR(Decode(payload, decoded_));
    for (size_t i = 0; i < inout.size(); ++i) inout[i] = decoded_[i] + inout[i];
    return Status::Ok();
  }
  if (payload.size() != inout.size() * sizeof(float))
    return Status::Corruption("codec payload: dense payload has " + std::to_string(payload.size()) + " bytes, expected " +
                              std::to_string(inout.size() * sizeof(float)));
  uint32_t bad = 0;
  for (size_t i = 0; i < inout.size(); ++i) {
    float v;
    std::memcpy(&v, payload.data() + i * sizeof(float), sizeof v);
    bad |= static_cast<uint32_t>((std::bit_cast<uint32_t>(v) & 0x7f800000u) == 0x7f800000u);
    inout[i] = v + inout[i];
  }
  // Refused before anything is kept: the caller drops this ring's values on an error.
  return bad ? Status::Corruption("codec payload: a dense value is not finite") : Status::Ok();
}

RingAllReduce::RingAllReduce(size_t members, size_t position, std::vector<float> values, double weight, double loss,
                             SegmentCodec* codec, size_t piece_values)
    : members_(members), position_(position), piece_values_(std::max<size_t>(piece_values, 1)),
      values_(std::move(values)), own_weight_(weight), own_loss_(loss), codec_(codec) {
  if (members_ <= 1) return;
  for (uint8_t phase = 0; phase < 2; ++phase) {
    received_[phase].assign(members_ - 1, 0);
    for (uint32_t hop = 0; hop + 1 < members_; ++hop) pieces_left_ += Pieces(SegmentAt(phase, hop));
  }
}

size_t RingAllReduce::Segment(int64_t k) const {
  const auto n = static_cast<int64_t>(members_);
  return static_cast<size_t>(((k % n) + n) % n);
}

size_t RingAllReduce::SegmentAt(uint8_t phase, uint32_t hop) const {
  const auto r = static_cast<int64_t>(position_);
  return phase == 0 ? Segment(r - 1 - hop) : Segment(r - hop);
}

// An empty segment still travels as one (empty) piece, so that every hop has one.
size_t RingAllReduce::Pieces(size_t segment) const {
  const auto [begin, end] = RingSegmentBounds(values_.size(), members_, segment);
  return std::max<size_t>(1, (end - begin + piece_values_ - 1) / piece_values_);
}

std::span<float> RingAllReduce::Values(size_t segment, uint32_t piece) {
  const auto [begin, end] = RingSegmentBounds(values_.size(), members_, segment);
  const size_t b = std::min(end, begin + size_t{piece} * piece_values_);
  return std::span<float>(values_).subspan(b, std::min(end, b + piece_values_) - b);
}

StatusOr<std::vector<RingHop>> RingAllReduce::Start() {
  std::vector<RingHop> out;
  if (members_ <= 1) {
    weight_ = own_weight_;
    loss_ = own_loss_;
    done_ = true;
    return out;
  }
  for (uint32_t piece = 0; piece < Pieces(position_); ++piece) {
    RingHop hop{.phase = 0, .hop = 0, .segment = static_cast<uint32_t>(position_), .contributors = 1,
                .weight = own_weight_, .loss = own_loss_, .payload = {}, .piece = piece};
    SHOAL_ASSIGN_OR_RETURN(hop.payload, codec_->Encode(Values(position_, piece)));
    out.push_back(std::move(hop));
  }
  return out;
}

bool RingAllReduce::Next(uint8_t phase, uint32_t hop, uint32_t piece) const {
  return !done_ && phase < 2 && hop + 1 < members_ && received_[phase][hop] == piece;
}

StatusOr<std::optional<RingHop>> RingAllReduce::Receive(RingHop in) {
  if (done_) return Status::InvalidArgument("the ring is already done");
  const uint32_t last = static_cast<uint32_t>(members_ - 2);
  const uint8_t phase = in.phase;
  const uint32_t hop = in.hop;
  const std::string name = "ring hop " + std::to_string(phase) + "." + std::to_string(hop);
  if (in.phase > 1 || in.hop > last) return Status::InvalidArgument(name + " does not exist in a ring of " + std::to_string(members_));
  if (!Next(in.phase, in.hop, in.piece))
    return Status::InvalidArgument(name + " piece " + std::to_string(in.piece) + " arrived, piece " +
                                   std::to_string(received_[in.phase][in.hop]) + " was expected");
  const size_t segment = SegmentAt(in.phase, in.hop);
  const uint32_t contributors = in.phase == 0 ? in.hop + 1 : static_cast<uint32_t>(members_);
  if (in.segment != segment || in.contributors != contributors || in.piece >= Pieces(segment))
    return Status::InvalidArgument(name + " carries piece " + std::to_string(in.piece) + " of segment " +
                                   std::to_string(in.segment) + " of " + std::to_string(in.contributors) +
                                   " members, not of segment " + std::to_string(segment) + " (" +
                                   std::to_string(Pieces(segment)) + " pieces) of " + std::to_string(contributors));
  const std::string where = "ring segment " + std::to_string(segment) + " piece " + std::to_string(in.piece);
  std::span<float> mine = Values(segment, in.piece);
  const bool totals = segment == 0 && in.piece == 0;  // every member takes segment 0's totals
  std::optional<RingHop> out;
  if (in.phase == 0) {
    // Reduce-scatter: the partial sum plus this member's values.
    SHOAL_RETURN_IF_ERROR(codec_->DecodeAdd(in.payload, mine).WithContext(where));
    RingHop next{.phase = 0, .hop = in.hop + 1, .segment = static_cast<uint32_t>(segment), .contributors = contributors + 1,
                 .weight = in.weight + own_weight_, .loss = in.loss + own_loss_, .payload = {}, .piece = in.piece};
    SHOAL_ASSIGN_OR_RETURN(next.payload, codec_->Encode(mine));
    if (in.hop == last) {
      // This member owns the reduced segment: it keeps what the others will decode (which,
      // with the exact codec, is what it holds).
      if (!codec_->exact()) SHOAL_RETURN_IF_ERROR(codec_->Decode(next.payload, mine));
      if (totals) weight_ = next.weight, loss_ = next.loss;
      next.phase = 1;
      next.hop = 0;
    }
    out = std::move(next);
  } else {
    // All-gather: keep the reduced piece and forward its bytes.
    SHOAL_RETURN_IF_ERROR(codec_->Decode(in.payload, mine).WithContext(where));
    if (totals) weight_ = in.weight, loss_ = in.loss;
    if (in.hop < last) {
      ++in.hop;
      out = std::move(in);
    }
  }
  ++received_[phase][hop];
  done_ = --pieces_left_ == 0;
  return out;
}

}  // namespace shoal::peer
