// Messages between serverless peers (shoal-peer; schema in schemas/shoal.fbs, protocol in
// docs/PROTOCOL.md "Peers"): encoding, semantic checks, and the bytes an update's signature
// covers. Frames go through VerifyFrame first, like every other frame.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "crypto/crypto.h"
#include "protocol/envelope.h"

namespace shoal::protocol {

struct PeerInfo {
  std::string name;
  std::string endpoint;
  std::string curve_key;                 // Z85, or empty without transport security
  std::array<uint8_t, 32> sign_key{};    // Ed25519 public key
  bool operator==(const PeerInfo&) const = default;
};

// What a joining peer learns from Members.
struct SwarmInfo {
  TaskConfig task;
  std::string mode;
  std::vector<PeerInfo> members;
  uint32_t step_timeout_ms = 2000;
  uint32_t heartbeat_interval_ms = 200;
  uint32_t heartbeat_timeout_ms = 2000;
  uint32_t chunk_bytes = static_cast<uint32_t>(kDefaultChunkBytes);
  std::vector<std::pair<std::string, double>> params;
  uint64_t steps = 0;
  // The value of params[name], or `fallback` when absent.
  double Param(const std::string& name, double fallback) const;
};

// Names of members: 1-64 printable characters, like client names.
bool ValidPeerName(const std::string& name);

Frame EncodeJoin(const Header& h, const PeerInfo& self, bool want_members);
Frame EncodeMembers(const Header& h, const SwarmInfo& swarm);
Frame EncodePeerUpdate(const Header& h, const std::string& author, const std::string& base_hash, uint64_t num_examples,
                       double loss, const ChunkRef& chunk, const crypto::Signature& signature);
Frame EncodeCommit(const Header& h, const std::vector<std::string>& authors, const std::vector<std::string>& hashes,
                   const std::string& model_hash);
Frame EncodeStateRequest(const Header& h, const std::string& reason);
Frame EncodeState(const Header& h, const std::string& model_hash, const std::string& state_hash, const ChunkRef& chunk);
Frame EncodeUpdateFetch(const Header& h, const std::string& author);

StatusOr<PeerInfo> DecodePeerInfo(const wire::PeerInfo* p);
StatusOr<SwarmInfo> DecodeMembers(const wire::Members* m);
// Authors and payload hashes of a Commit (equal counts, names valid, at most 4096 entries).
StatusOr<std::vector<std::pair<std::string, std::string>>> DecodeCommit(const wire::Commit* c);

// The bytes a PeerUpdate's signature covers: a domain tag, the swarm id and step (so an update
// cannot be replayed into another swarm or step), the author, the base hash, the weight and the
// BLAKE2b-256 of the whole (reassembled) payload, crypto::Hash256(payload): the caller computes
// it once, as it is also the payload hash a Commit lists.
std::vector<uint8_t> SignedUpdateBytes(uint64_t swarm, uint64_t step, const std::string& author,
                                       const std::string& base_hash, uint64_t num_examples,
                                       const std::array<uint8_t, 32>& payload_digest);

}  // namespace shoal::protocol
