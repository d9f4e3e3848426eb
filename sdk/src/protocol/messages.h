// Typed messages of the whole protocol: federated (aggregator <-> client) and between peers.
// A verified frame (VerifyFrame) becomes one Message: its header and a typed body with every
// field checked — strings present and bounded, the round config in range, the update report
// decoded, peer names, hashes, signatures and counts as protocol/peer.h lists — so that
// nothing above protocol/ reads FlatBuffers.
// Byte views (chunk data) point into the frame: keep the frame alive while using them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "protocol/federated.h"
#include "protocol/peer.h"
#include "protocol/secagg.h"

namespace shoal::protocol {

// The wire's enums, by their protocol names (their values are the wire format).
using ErrorCode = wire::ErrorCode;
using PayloadEncoding = wire::PayloadEncoding;
using MessageKind = wire::Message;

struct Hello {
  std::string client_name;  // not yet checked against the name rules (the service does)
  uint64_t num_examples = 0;
  std::string trainer;
  std::vector<std::string> codecs;  // stage names; names over 64 bytes are dropped
  std::vector<std::string> features;  // capabilities ("standardize"); names over 64 bytes are dropped
};
struct RoundTask {
  std::optional<RoundConfig> config;  // nullopt when the frame's config is out of range (the round is skipped)
  std::string config_error;           // why, then
  uint32_t deadline_ms = 0;
  std::string model_hash;
  PayloadEncoding encoding = PayloadEncoding::DenseF32;
  ChunkView chunk;
  std::string base_hash;    // Codec: the model the delta applies to
  uint64_t delta_round = 0;  // Codec: the round whose aggregate the delta is
};
struct UpdateChunk {
  uint64_t num_examples = 0;  // not yet range-checked (the service refuses outside [1, kMaxExamples])
  UpdateReport report;
  PayloadEncoding encoding = PayloadEncoding::Codec;
  ChunkView chunk;
};
struct Resync {
  std::string have_hash;
};
struct Ack {
  bool accepted = false;
  uint64_t commit_round = 0;  // the round whose commit holds (or discarded) the update
};
struct ErrorReply {
  ErrorCode code = ErrorCode::Unknown;
  std::string reason;
};
struct Heartbeat {
  bool busy = false;
  float progress = 0.0f;
};
struct Bye {
  std::string reason;
};

// One alternative per message kind; the peer messages' (Join, SwarmInfo for Members,
// PeerUpdate, Commit, StateRequest, State, UpdateFetch, RingSegment) are in protocol/peer.h.
// Secure aggregation's (protocol/secagg.h) are the state machines' own types.
using Body = std::variant<Hello, WelcomeInfo, RoundTask, UpdateChunk, Resync, Ack, ErrorReply, Heartbeat, Bye,
                          Join, SwarmInfo, PeerUpdate, Commit, StateRequest, State, UpdateFetch, RingSegment,
                          privacy::secagg::AdvertiseKeys, privacy::secagg::Setup, privacy::secagg::ShareKeys,
                          privacy::secagg::SharesFor, SecAggMaskedChunk, privacy::secagg::UnmaskRequest,
                          privacy::secagg::UnmaskShares, privacy::secagg::CheckSignature,
                          privacy::secagg::UnmaskProof>;

struct Message {
  Header header;
  MessageKind kind = MessageKind::NONE;
  Body body;
};

// The name of an error code ("MalformedFrame", ...), for logs and the rejection counters.
const char* ErrorName(ErrorCode code);

// The kind and the header of a verified frame's message, also when DecodeMessage refuses
// its body (so a receiver can check the sender and sequence first).
MessageKind KindOf(const Verified& frame);
Header HeaderOf(const Verified& frame);

// The typed message of a verified frame; Protocol error (with a reason fit for an Error
// reply) when a field is malformed: a string over 4096 bytes, bad metrics, a bad Welcome,
// a peer message's bad field.
StatusOr<Message> DecodeMessage(const Verified& frame);

}  // namespace shoal::protocol
