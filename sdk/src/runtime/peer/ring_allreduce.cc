#include "runtime/peer/ring_allreduce.h"

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

RingAllReduce::RingAllReduce(size_t members, size_t position, std::vector<float> values, double weight, double loss,
                             SegmentCodec* codec)
    : members_(members), position_(position), values_(std::move(values)), own_weight_(weight), own_loss_(loss),
      codec_(codec) {}

size_t RingAllReduce::Segment(int64_t k) const {
  const auto n = static_cast<int64_t>(members_);
  return static_cast<size_t>(((k % n) + n) % n);
}

std::span<float> RingAllReduce::Values(size_t segment) {
  const auto [begin, end] = RingSegmentBounds(values_.size(), members_, segment);
  return std::span<float>(values_).subspan(begin, end - begin);
}

StatusOr<std::optional<RingHop>> RingAllReduce::Start() {
  if (members_ <= 1) {
    weight_ = own_weight_;
    loss_ = own_loss_;
    done_ = true;
    return std::optional<RingHop>();
  }
  RingHop out{.phase = 0, .hop = 0, .segment = static_cast<uint32_t>(position_), .contributors = 1,
              .weight = own_weight_, .loss = own_loss_, .payload = {}};
  SHOAL_ASSIGN_OR_RETURN(out.payload, codec_->Encode(Values(position_)));
  return std::optional<RingHop>(std::move(out));
}

StatusOr<std::optional<RingHop>> RingAllReduce::Receive(const RingHop& in) {
  if (done_) return Status::InvalidArgument("the ring is already done");
  const auto r = static_cast<int64_t>(position_);
  const uint32_t last = static_cast<uint32_t>(members_ - 2);
  if (in.phase != phase_ || in.hop != hop_)
    return Status::InvalidArgument("ring hop " + std::to_string(in.phase) + "." + std::to_string(in.hop) + " arrived, " +
                                   std::to_string(phase_) + "." + std::to_string(hop_) + " was expected");
  const size_t segment = phase_ == 0 ? Segment(r - 1 - hop_) : Segment(r - hop_);
  const uint32_t contributors = phase_ == 0 ? hop_ + 1 : static_cast<uint32_t>(members_);
  if (in.segment != segment || in.contributors != contributors)
    return Status::InvalidArgument("ring hop " + std::to_string(phase_) + "." + std::to_string(hop_) + " carries segment " +
                                   std::to_string(in.segment) + " of " + std::to_string(in.contributors) +
                                   " members, not segment " + std::to_string(segment) + " of " + std::to_string(contributors));
  std::span<float> mine = Values(segment);
  if (phase_ == 0) {
    // Reduce-scatter: the partial sum plus this member's values.
    std::vector<float> partial(mine.size());
    SHOAL_RETURN_IF_ERROR(codec_->Decode(in.payload, partial).WithContext("ring segment " + std::to_string(segment)));
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = partial[i] + mine[i];
    RingHop out{.phase = 0, .hop = hop_ + 1, .segment = static_cast<uint32_t>(segment), .contributors = contributors + 1,
                .weight = in.weight + own_weight_, .loss = in.loss + own_loss_, .payload = {}};
    SHOAL_ASSIGN_OR_RETURN(out.payload, codec_->Encode(mine));
    if (hop_ < last) {
      ++hop_;
      return std::optional<RingHop>(std::move(out));
    }
    // This member owns the reduced segment: it keeps what the others will decode.
    SHOAL_RETURN_IF_ERROR(codec_->Decode(out.payload, mine));
    if (segment == 0) weight_ = out.weight, loss_ = out.loss;
    out.phase = 1;
    out.hop = 0;
    phase_ = 1;
    hop_ = 0;
    return std::optional<RingHop>(std::move(out));
  }
  // All-gather: keep the reduced segment and forward its bytes.
  SHOAL_RETURN_IF_ERROR(codec_->Decode(in.payload, mine).WithContext("ring segment " + std::to_string(segment)));
  if (segment == 0) weight_ = in.weight, loss_ = in.loss;  // every member takes segment 0's totals
  if (hop_ == last) {
    done_ = true;
    return std::optional<RingHop>();
  }
  RingHop out = in;
  out.hop = ++hop_;
  return std::optional<RingHop>(std::move(out));
}

}  // namespace shoal::peer
