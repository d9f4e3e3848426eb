// Every frame a socket can deliver: VerifyFrame (size, FlatBuffers verifier, kind, version),
// then DecodeMessage, which reaches the semantic checks of every message of the server
// protocol, the peer protocol and secure aggregation. A refused frame must say why; a decoded
// one must be of the kind its header names.
#include <span>

#include "fuzz.h"
#include "protocol/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal::protocol;
  Verified v = VerifyFrame(std::span<const uint8_t>(data, size), size_t{4} << 20);
  if (!v.ok()) {
    FUZZ_CHECK(!v.reason.empty());
    return 0;
  }
  (void)HeaderOf(v);
  const MessageKind kind = KindOf(v);
  auto m = DecodeMessage(v);
  if (!m.ok()) {
    FUZZ_CHECK(!m.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(m->kind == kind);
  return 0;
}
