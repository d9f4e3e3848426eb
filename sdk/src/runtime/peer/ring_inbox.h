// The ring hops a peer holds before it takes them (runtime/peer/ring.cc): one slot per piece of
// a hop, as its chunks arrive, for this peer's ring or rings it does not see yet. It counts the
// bytes each sender holds in it, so that one member cannot make a peer hold more than a bound
// (protocol/limits.h, MaxRingBytesPerSender) however many rings, hops and pieces it makes up.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "crypto/crypto.h"
#include "protocol/chunks.h"
#include "runtime/peer/ring_allreduce.h"

namespace shoal::peer {

// One piece of one hop of a ring, as it arrives (chunk by chunk) from the member before this one.
struct RingInbound {
  std::string from;
  std::chrono::steady_clock::time_point since;  // its first chunk arrived
  std::unique_ptr<protocol::ChunkAssembler> assembler;
  bool complete = false;
  RingHop hop;
  crypto::Signature signature{};  // its first chunk's: checked once the piece is whole
  uint64_t held = 0;              // bytes counted against `from` (RingInbox::Hold)
};
// (step, ring hash, attempt, phase, hop, piece)
using RingKey = std::tuple<uint64_t, std::string, uint32_t, uint8_t, uint32_t, uint32_t>;

class RingInbox {
 public:
  using Map = std::map<RingKey, RingInbound>;
  using iterator = Map::iterator;
  using const_iterator = Map::const_iterator;

  iterator begin() { return slots_.begin(); }
  iterator end() { return slots_.end(); }
  const_iterator begin() const { return slots_.begin(); }
  const_iterator end() const { return slots_.end(); }
  iterator lower_bound(const RingKey& key) { return slots_.lower_bound(key); }
  // The slot for `key`, made empty when there is none.
  RingInbound& operator[](const RingKey& key) { return slots_[key]; }

  // Removes a slot, and its bytes from its sender's count.
  iterator erase(iterator it) {
    Release(it->second);
    return slots_.erase(it);
  }
  void erase(const RingKey& key) {
    if (auto it = slots_.find(key); it != slots_.end()) erase(it);
  }
  // Removes a slot and gives it to the caller.
  RingInbound Take(iterator it) {
    Release(it->second);
    RingInbound in = std::move(it->second);
    slots_.erase(it);
    return in;
  }
  template <typename Pred>
  void EraseIf(Pred pred) {
    for (auto it = slots_.begin(); it != slots_.end();) it = pred(it->first, it->second) ? erase(it) : std::next(it);
  }

  // `slot` (whose `from` is set) now holds `bytes`.
  void Hold(RingInbound& slot, uint64_t bytes) {
    uint64_t& total = held_[slot.from];
    total = total - slot.held + bytes;
    slot.held = bytes;
  }
  // Bytes `from`'s slots hold.
  uint64_t held(const std::string& from) const {
    auto it = held_.find(from);
    return it == held_.end() ? 0 : it->second;
  }

 private:
  void Release(RingInbound& slot) {
    auto it = held_.find(slot.from);
    if (it == held_.end()) return;
    it->second -= slot.held;
    slot.held = 0;
    if (it->second == 0) held_.erase(it);
  }

  Map slots_;
  std::map<std::string, uint64_t> held_;
};

}  // namespace shoal::peer
