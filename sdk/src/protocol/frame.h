// Framing (DESIGN.md §4): the envelope every message travels in, its header, and the check
// every inbound frame goes through first (VerifyFrame: size -> FlatBuffers Verifier ->
// version) before a message family's decoder (federated.h, peer.h, secagg.h; messages.h
// turns a verified frame into a typed message). Also the small checks every decoder shares.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "protocol/limits.h"
#include "shoal/status.h"
#include "shoal/wire/shoal_generated.h"

namespace shoal::protocol {

// Bumped only for changes old peers cannot read (see schemas/shoal.fbs).
// 2: RingSegment (ring all-reduce swarms); 3: SecAgg*, PrivacyConfig; 4: SecAgg's consistency
// round (SecAggCheckSignature, SecAggUnmaskProof), long-term signing identities
inline constexpr uint32_t kProtocolVersion = 6;

using Frame = std::vector<uint8_t>;

// Envelope fields shared by every message.
struct Header {
  uint64_t session = 0;
  uint64_t round = 0;
  uint32_t sender = 0;
  uint64_t sequence = 0;
};

// Result of VerifyFrame: the envelope (pointing into the frame's bytes) or why it was refused.
struct Verified {
  const wire::Envelope* envelope = nullptr;  // into the frame, or into `aligned`
  wire::ErrorCode error = wire::ErrorCode::Unknown;
  std::string reason;
  // FlatBuffers reads scalars in place and needs the buffer 8-byte aligned; ZeroMQ hands out
  // small messages at any offset of its receive buffer. Such a frame is verified and read
  // from this aligned copy (heap storage: a moved Verified keeps `envelope` valid).
  std::unique_ptr<uint64_t[]> aligned;
  bool ok() const { return envelope != nullptr; }
};
// Size check, file identifier, FlatBuffers Verifier with tight depth/table limits, a known
// message kind, then the protocol version (VersionMismatch names both versions).
Verified VerifyFrame(std::span<const uint8_t> frame, size_t max_frame_bytes);

// The envelope around a message (the version and the header), as a frame.
Frame Finish(flatbuffers::FlatBufferBuilder& fbb, const Header& h, wire::Message kind, flatbuffers::Offset<void> msg);

// What every decoder applies to a string: present when required, at most 4096 bytes.
Status CheckString(const flatbuffers::String* s, const char* what, bool required);
// A string's text ("" when absent).
std::string StringOrEmpty(const flatbuffers::String* s);
// A byte field of exactly N bytes (keys, signatures) copied into `out`; Protocol(`error`) when
// it is absent or of another length.
template <size_t N>
Status CopyFixedBytes(const flatbuffers::Vector<uint8_t>* v, std::array<uint8_t, N>& out, const std::string& error) {
  if (!v || v->size() != N) return Status::Protocol(error);
  std::copy(v->begin(), v->end(), out.begin());
  return Status::Ok();
}

// The names of clients and of peers: 1-64 printable ASCII characters, no spaces.
bool ValidName(const std::string& name);

// Short name of a message kind for logs and metrics ("Hello", "Update", ...).
const char* MessageName(wire::Message kind);

}  // namespace shoal::protocol
