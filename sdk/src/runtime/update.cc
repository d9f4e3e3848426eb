#include "runtime/update.h"

#include <chrono>
#include <cmath>

#include "codec/codec.h"
#include "codec/round_context.h"

namespace shoal::runtime {

std::optional<UpdatePipeline::Failure> UpdatePipeline::Run(Update& update) const {
  for (const auto& stage : stages_) {
    Status st = stage->Apply(update);
    if (!st.ok()) return Failure{stage->refusal(), st.WithContext(stage->name())};
  }
  return std::nullopt;
}

namespace {

class Encode final : public UpdateStage {
 public:
  Encode(codec::Codec* codec, uint64_t seed) : codec_(codec), seed_(seed) {}
  const char* name() const override { return "encode"; }
  Status Apply(Update& u) override {
    const auto started = std::chrono::steady_clock::now();
    // Into the update's own buffer: an update reused across rounds keeps its capacity.
    SHOAL_RETURN_IF_ERROR(EncodeUpload(*codec_, seed_, u.round, u.author, u.delta, &u.payload));
    u.report.encode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return Status::Ok();
  }

 private:
  codec::Codec* codec_;
  uint64_t seed_;
};

class Decode final : public UpdateStage {
 public:
  Decode(const codec::Codec* codec, uint64_t seed, size_t n) : codec_(codec), seed_(seed), n_(n) {}
  const char* name() const override { return "decode"; }
  Refusal refusal() const override { return Refusal::kShapeMismatch; }
  Status Apply(Update& u) override {
    u.delta.resize(n_);
    return DecodeUpload(*codec_, seed_, u.round, u.payload, u.delta);
  }

 private:
  const codec::Codec* codec_;
  uint64_t seed_;
  size_t n_;
};

class Validate final : public UpdateStage {
 public:
  explicit Validate(double max_norm) : max_norm_(max_norm) {}
  const char* name() const override { return "validate"; }
  Refusal refusal() const override { return refusal_; }
  Status Apply(Update& u) override {
    double sq = 0.0;
    for (size_t i = 0; i < u.delta.size(); ++i) {
      if (!std::isfinite(u.delta[i])) {
        refusal_ = Refusal::kShapeMismatch;
        return Status::Corruption("value " + std::to_string(i) + " is not finite");
      }
      sq += static_cast<double>(u.delta[i]) * u.delta[i];
    }
    if (max_norm_ > 0 && std::sqrt(sq) > max_norm_) {
      refusal_ = Refusal::kTooLarge;
      return Status::InvalidArgument("update norm " + std::to_string(std::sqrt(sq)) + " exceeds --max-update-norm " +
                                     std::to_string(max_norm_));
    }
    return Status::Ok();
  }

 private:
  double max_norm_;
  Refusal refusal_ = Refusal::kMalformed;
};

}  // namespace

std::unique_ptr<UpdateStage> EncodeStage(codec::Codec* codec, uint64_t task_seed) {
  return std::make_unique<Encode>(codec, task_seed);
}
std::unique_ptr<UpdateStage> DecodeStage(const codec::Codec* codec, uint64_t task_seed, size_t n) {
  return std::make_unique<Decode>(codec, task_seed, n);
}
std::unique_ptr<UpdateStage> ValidateStage(double max_norm) { return std::make_unique<Validate>(max_norm); }

Status EncodeUpload(codec::Codec& codec, uint64_t task_seed, uint64_t round, const std::string& author,
                    std::span<const float> delta, std::vector<uint8_t>* payload) {
  return codec.EncodeInto(delta, codec::MakeRoundContext(task_seed, round, codec::NameSeed(author)), payload);
}

codec::RoundContext SharedContext(uint64_t task_seed, uint64_t round) { return codec::MakeRoundContext(task_seed, round, 0); }

Status DecodeUpload(const codec::Codec& codec, uint64_t task_seed, uint64_t round, std::span<const uint8_t> payload,
                    std::span<float> out) {
  return codec.Decode(payload, SharedContext(task_seed, round), out);
}

namespace {

// base + decode(payload) into *model; false when a value is not finite.
StatusOr<bool> AddDecoded(const codec::Codec& codec, uint64_t task_seed, uint64_t round, std::span<const uint8_t> payload,
                          std::span<const float> base, std::vector<float>* model) {
  model->assign(base.size(), 0.0f);
  SHOAL_RETURN_IF_ERROR(codec.Decode(payload, SharedContext(task_seed, round), *model));
  bool finite = true;
  for (size_t i = 0; i < model->size(); ++i) {
    (*model)[i] += base[i];
    finite = finite && std::isfinite((*model)[i]);
  }
  return finite;
}

}  // namespace

StatusOr<Download> EncodeDownload(codec::Codec& codec, uint64_t task_seed, uint64_t round, std::span<const float> delta,
                                  std::span<const float> base) {
  Download d;
  SHOAL_ASSIGN_OR_RETURN(d.payload, codec.Encode(delta, SharedContext(task_seed, round)));
  std::vector<float> model;
  auto finite = AddDecoded(codec, task_seed, round, d.payload, base, &model);
  if (!finite.ok()) return finite.status().WithContext("decoding our own download delta");
  if (*finite) d.model = std::move(model);
  return d;
}

StatusOr<std::vector<float>> ApplyDownload(const codec::Codec& codec, uint64_t task_seed, uint64_t round,
                                           std::span<const uint8_t> payload, std::span<const float> base) {
  std::vector<float> model;
  SHOAL_ASSIGN_OR_RETURN(const bool finite, AddDecoded(codec, task_seed, round, payload, base, &model));
  if (!finite) return Status::Corruption("the model it makes is not finite");
  return model;
}

}  // namespace shoal::runtime
