#include "protocol/frame.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace shoal::protocol {

using flatbuffers::FlatBufferBuilder;

Frame Finish(FlatBufferBuilder& fbb, const Header& h, wire::Message kind, flatbuffers::Offset<void> msg) {
  wire::EnvelopeBuilder eb(fbb);
  eb.add_version(kProtocolVersion);
  eb.add_session(h.session);
  eb.add_round(h.round);
  eb.add_sender(h.sender);
  eb.add_sequence(h.sequence);
  eb.add_message_type(kind);
  eb.add_message(msg);
  fbb.Finish(eb.Finish(), wire::EnvelopeIdentifier());
  return Frame(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

Status CheckString(const flatbuffers::String* s, const char* what, bool required) {
  if (!s) return required ? Status::Protocol(std::string(what) + " is missing") : Status::Ok();
  if (s->size() > kMaxStringBytes) return Status::Protocol(std::string(what) + " is longer than 4096 bytes");
  return Status::Ok();
}

std::string StringOrEmpty(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

bool ValidName(const std::string& s) {
  static_assert(kMaxPeerName == kMaxClientName);
  if (s.empty() || s.size() > kMaxClientName) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 32 && c < 127; });
}

Verified VerifyFrame(std::span<const uint8_t> frame, size_t max_frame_bytes) {
  Verified v;
  v.error = wire::ErrorCode::MalformedFrame;
  if (frame.size() < 16) {
    v.reason = "frame of " + std::to_string(frame.size()) + " bytes is too short to be an envelope";
    return v;
  }
  if (frame.size() > max_frame_bytes) {
    v.reason = "frame of " + std::to_string(frame.size()) + " bytes exceeds the limit of " +
               std::to_string(max_frame_bytes);
    return v;
  }
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(uint64_t) != 0) {
    v.aligned.reset(new uint64_t[(frame.size() + 7) / 8]);
    std::memcpy(v.aligned.get(), frame.data(), frame.size());
    frame = {reinterpret_cast<const uint8_t*>(v.aligned.get()), frame.size()};
  }
  if (!flatbuffers::BufferHasIdentifier(frame.data(), wire::EnvelopeIdentifier())) {
    v.reason = "not a Shoal envelope (file identifier is not SHOL)";
    return v;
  }
  flatbuffers::Verifier verifier(frame.data(), frame.size(), kMaxDepth, kMaxTables);
  if (!wire::VerifyEnvelopeBuffer(verifier)) {
    v.reason = "envelope failed FlatBuffers verification";
    return v;
  }
  const wire::Envelope* env = wire::GetEnvelope(frame.data());
  if (env->version() != kProtocolVersion) {
    v.error = wire::ErrorCode::VersionMismatch;
    v.reason = "protocol version " + std::to_string(env->version()) + " is not supported; this side speaks version " +
               std::to_string(kProtocolVersion);
    return v;
  }
  if (env->message_type() == wire::Message::NONE || env->message_type() > wire::Message::MAX ||
      env->message() == nullptr) {
    v.reason = "envelope carries no message (or an unknown kind from a newer protocol)";
    return v;
  }
  v.envelope = env;
  v.error = wire::ErrorCode::Unknown;
  return v;
}

const char* MessageName(wire::Message kind) {
  const char* name = wire::EnumNameMessage(kind);
  return (name && *name) ? name : "Unknown";
}

}  // namespace shoal::protocol
