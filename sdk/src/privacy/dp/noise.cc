#include "privacy/dp/noise.h"

#include <cstring>

#include "core/rng.h"

namespace shoal::privacy {
namespace {
constexpr size_t kBufferBytes = 4096;  // 64 ChaCha20 blocks per refill
crypto::StreamKey FreshKey() {
  crypto::StreamKey key;
  crypto::RandomBytes(key);
  return key;
}
}  // namespace

SecureRandom::SecureRandom() : SecureRandom(FreshKey()) {}

SecureRandom::SecureRandom(const crypto::StreamKey& key) : key_(key), buffer_(kBufferBytes), used_(kBufferBytes) {}

void SecureRandom::Refill() {
  constexpr uint32_t kBlocks = kBufferBytes / 64;
  if (counter_ > UINT32_MAX - kBlocks) {  // 256 GiB of stream: move to the next nonce
    for (auto& b : nonce_)
      if (++b != 0) break;
    counter_ = 0;
  }
  crypto::ChaCha20(key_, nonce_, counter_, buffer_);
  counter_ += kBlocks;
  used_ = 0;
}

uint64_t SecureRandom::NextU64() {
  if (used_ + 8 > buffer_.size()) Refill();
  uint64_t v;
  std::memcpy(&v, buffer_.data() + used_, 8);
  used_ += 8;
  return v;
}

double SecureRandom::Uniform() { return static_cast<double>(NextU64() >> 11) * (1.0 / 9007199254740992.0); }

double SecureRandom::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - Uniform();  // (0, 1]
  const auto [a, b] = BoxMuller(u1, Uniform());
  spare_ = b;
  has_spare_ = true;
  return a;
}

void AddGaussianNoise(SecureRandom& random, double stddev, std::span<double> values) {
  for (double& v : values) v += stddev * random.Normal();
}

}  // namespace shoal::privacy
