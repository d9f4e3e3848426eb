#include "transport/channel.h"

namespace shoal::transport {

bool IsLoopbackEndpoint(const std::string& ep) {
  for (const char* prefix : {"inproc://", "ipc://", "tcp://127.", "tcp://localhost:", "tcp://[::1]:"})
    if (ep.rfind(prefix, 0) == 0) return true;
  return false;
}

Status HandshakeFailure(const Channel& channel, const std::string& who, const std::string& own_key) {
  const std::string attempts = std::to_string(channel.handshake_failures_in_a_row());
  const std::string& why = channel.last_handshake_failure();
  if (channel.last_failure_was_auth())
    return Status::PermissionDenied(who + " refused this key " + own_key + " (" + why + ", " + attempts +
                                    " attempts): ask its operator to add this machine's .pub file to --allow-keys");
  // Without keys, a CURVE server just closes the connection: the likeliest cause.
  const std::string hint =
      own_key.empty() ? "if it uses CURVE security, pass --secret-key and the server's public key"
      : why.find("mechanisms differ") != std::string::npos
          ? "it does not use CURVE (started without --secret-key?)"
          : "check that the public key given for it (--server-key, or the @KEY of --peers) is really its key";
  return Status::Unavailable("the handshake with " + who + " failed " + attempts + " times: " + why + "; " + hint);
}

}  // namespace shoal::transport
