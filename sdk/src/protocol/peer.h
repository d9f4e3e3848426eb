// Messages between serverless peers (shoal-peer; schema in schemas/shoal.fbs, protocol in
// docs/PROTOCOL.md "Peers"): encoding, the typed value of each message with its semantic
// checks, and the bytes an update's signature covers. Frames go through VerifyFrame first,
// like every other frame, and DecodeMessage (protocol/messages.h) gives these typed values.
// Decoding refuses: a member name that is not 1-64 printable characters, an endpoint that is
// not tcp:// or ipc://, a CURVE key not 40 Z85 characters, a signing key not 32 bytes; an
// unknown mode, an empty or oversized member list, inconsistent timing, bad parameters; an
// update whose author is not a valid name, whose weight is outside [1, kMaxExamples], whose
// loss is not finite, whose signature is not 64 bytes or base hash not 64 characters; a
// commit whose lists differ in length, exceed kMaxMembers or hold a bad entry; a ring segment
// whose ring hash is not 64 characters, whose phase is not 0 or 1, whose hop, segment or
// contributors are out of range, or whose weight or loss is not finite; any string over
// kMaxStringBytes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "crypto/crypto.h"
#include "protocol/chunks.h"
#include "protocol/task.h"

namespace shoal::protocol {

struct PeerInfo {
  std::string name;
  std::string endpoint;
  std::string curve_key;                 // Z85, or empty without transport security
  std::array<uint8_t, 32> sign_key{};    // Ed25519 public key
  bool operator==(const PeerInfo&) const = default;
};

// Members: what a joining peer learns (the swarm's task, settings and member list).
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
  bool operator==(const SwarmInfo&) const = default;
};

// Join: a peer introduces itself (its first frame on every connection); a joiner also asks
// for the member list.
struct Join {
  PeerInfo self;
  bool want_members = false;
};
// One chunk of an author's update for the step in the header, signed by its author.
struct PeerUpdate {
  std::string author;             // a valid peer name
  std::string base_hash;          // kHashHexChars: the model the update was computed on
  uint64_t num_examples = 0;      // in [1, kMaxExamples]
  double loss = 0.0;              // finite
  ChunkView chunk;                // points into the frame; not present when the frame has none
  crypto::Signature signature{};  // over SignedUpdateBytes
};
// The leader's commit of the step in the header.
struct Commit {
  std::vector<std::pair<std::string, std::string>> entries;  // author (valid name), payload hash (kHashHexChars)
  std::string model_hash;                                    // the model after the step
};
struct StateRequest {
  std::string reason;  // for the sender's log
};
// One chunk of the state after the step in the header.
struct State {
  std::string model_hash;  // not checked here: the receiver compares it with the reassembled state
  std::string state_hash;
  ChunkView chunk;         // points into the frame
};
// A request for an update the sender holds (the step in the header).
struct UpdateFetch {
  std::string author;  // a valid peer name
};
// One chunk of one hop of the step's ring all-reduce (the step in the header; schema:
// RingSegment). Decoding checks the fields' ranges; whether the hop is the one the receiver
// expects is the ring's business (runtime/peer/ring_allreduce.h).
struct RingSegment {
  std::string ring_hash;      // kHashHexChars
  uint32_t attempt = 0;
  uint8_t phase = 0;          // 0 reduce-scatter, 1 all-gather
  uint32_t hop = 0;           // < kMaxMembers
  uint32_t segment = 0;       // < kMaxMembers
  uint32_t contributors = 0;  // in [1, kMaxMembers]
  double weight = 0.0;        // finite, in [0, kMaxMembers * kMaxExamples]
  double loss = 0.0;          // finite
  uint32_t piece = 0;         // of the segment (its kRingPieceValues values), < kMaxRingPieces
  ChunkView chunk;            // points into the frame
  crypto::Signature signature{};  // the sender's, over SignedRingHopBytes (every chunk carries it)
};


Frame EncodeJoin(const Header& h, const PeerInfo& self, bool want_members);
Frame EncodeMembers(const Header& h, const SwarmInfo& swarm);
Frame EncodePeerUpdate(const Header& h, const std::string& author, const std::string& base_hash, uint64_t num_examples,
                       double loss, const ChunkRef& chunk, const crypto::Signature& signature);
Frame EncodeCommit(const Header& h, const std::vector<std::string>& authors, const std::vector<std::string>& hashes,
                   const std::string& model_hash);
Frame EncodeStateRequest(const Header& h, const std::string& reason);  // reason cut to kMaxStringBytes
Frame EncodeState(const Header& h, const std::string& model_hash, const std::string& state_hash, const ChunkRef& chunk);
Frame EncodeUpdateFetch(const Header& h, const std::string& author);
// `r.chunk` is ignored: `chunk` is the payload slice this frame carries.
Frame EncodeRingSegment(const Header& h, const RingSegment& r, const ChunkRef& chunk);

// Semantic checks of each peer message, for DecodeMessage (use that): Protocol errors with a
// reason fit for an Error reply.
StatusOr<PeerInfo> DecodePeerInfo(const wire::PeerInfo* p);
StatusOr<Join> DecodeJoin(const wire::Join* j);
StatusOr<SwarmInfo> DecodeMembers(const wire::Members* m);
StatusOr<PeerUpdate> DecodePeerUpdate(const wire::PeerUpdate* u);
StatusOr<Commit> DecodeCommit(const wire::Commit* c);
StatusOr<StateRequest> DecodeStateRequest(const wire::StateRequest* r);
StatusOr<State> DecodeState(const wire::State* s);
StatusOr<UpdateFetch> DecodeUpdateFetch(const wire::UpdateFetch* f);
StatusOr<RingSegment> DecodeRingSegment(const wire::RingSegment* r);

// The bytes a PeerUpdate's signature covers: a domain tag, the swarm id and step (so an update
// cannot be replayed into another swarm or step), the author, the base hash, the weight, the
// reported loss (its IEEE-754 bits: a relay cannot change what the step's loss averages) and the
// BLAKE2b-256 of the whole (reassembled) payload, crypto::Hash256(payload): the caller computes
// it once, as it is also the payload hash a Commit lists.
std::vector<uint8_t> SignedUpdateBytes(uint64_t swarm, uint64_t step, const std::string& author,
                                       const std::string& base_hash, uint64_t num_examples, double loss,
                                       const std::array<uint8_t, 32>& payload_digest);
// The bytes a ring hop's signature covers: a domain tag, the swarm and step, the sender, the
// ring (hash, attempt), where the piece goes (phase, hop, segment, piece), what it sums
// (contributors, weight, the loss's IEEE-754 bits) and the BLAKE2b-256 of its whole payload.
// A member signs each piece it sends, so a hop cannot be altered, replayed into another
// step, swarm, ring or place, or passed off as another member's.
std::vector<uint8_t> SignedRingHopBytes(uint64_t swarm, uint64_t step, const std::string& sender,
                                        const RingSegment& r, const std::array<uint8_t, 32>& payload_digest);

}  // namespace shoal::protocol
