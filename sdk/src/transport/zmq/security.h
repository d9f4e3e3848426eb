// Transport security from the command line's key flags, decided the same way for the
// aggregator, the client and the peer (README "Security"): secure by default.
//
//   - Keys come in pairs: --secret-key (this process's PREFIX.key from shoal-keygen) with the
//     other side's public keys (--allow-keys for a listener, --server-key for a client), or
//     neither.
//   - --insecure contradicts --secret-key.
//   - Without keys, an endpoint other machines can reach (a listen address, an advertised
//     address, an aggregator to connect to) needs --insecure, which is logged as a warning;
//     loopback endpoints need nothing.
//
// What it refuses: one key flag without the other (InvalidArgument), --insecure with keys
// (InvalidArgument), a reachable endpoint without keys or --insecure (FailedPrecondition), an
// allow-list that holds no key (FailedPrecondition: nobody could connect).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "crypto/keys.h"
#include "shoal/status.h"

namespace shoal::transport {

struct SecurityFlags {
  std::string role{};         // "aggregator", "client", "peer": for messages
  std::string secret_key{};   // its value
  std::string others_flag{};  // "--allow-keys" or "--server-key"
  std::string others{};       // its value
  std::string others_what{};  // what the others' keys are, e.g. "the public keys of the clients to admit"
  bool insecure = false;
  // Endpoints this process exposes or talks to, as {flag, endpoint}: each must be loopback
  // unless keys or --insecure are given.
  std::vector<std::pair<std::string, std::string>> endpoints{};
  std::string secret_key_flag = "--secret-key";  // the flag that gives `secret_key`, for messages
};

// Checks the flags as above. True when CURVE is on (keys given), false when off (loopback
// only, or --insecure: warned about once here).
StatusOr<bool> CheckSecurityFlags(const SecurityFlags& flags);

// The allow-list at `path` (file or directory), refused when it holds no key; `who` names
// those it admits ("client", "peer") in that message.
StatusOr<std::shared_ptr<const crypto::AllowList>> LoadAllowList(const std::string& path, const std::string& who);

}  // namespace shoal::transport
