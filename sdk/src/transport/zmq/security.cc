#include "transport/zmq/security.h"

#include <spdlog/spdlog.h>

#include "transport/channel.h"

namespace shoal::transport {

StatusOr<bool> CheckSecurityFlags(const SecurityFlags& f) {
  if (f.secret_key.empty() && !f.others.empty())
    return Status::InvalidArgument(f.others_flag + " needs " + f.secret_key_flag + " (this " + f.role +
                                   "'s key file from shoal-keygen)");
  if (!f.secret_key.empty() && f.others.empty())
    return Status::InvalidArgument(f.secret_key_flag + " needs " + f.others_flag + " (" + f.others_what + ")");
  if (!f.secret_key.empty()) {
    if (f.insecure) return Status::InvalidArgument("--insecure contradicts " + f.secret_key_flag + "; give one or the other");
    return true;
  }
  for (const auto& [flag, endpoint] : f.endpoints) {
    if (!IsLoopbackEndpoint(endpoint) && !f.insecure)
      return Status::FailedPrecondition(flag + " " + endpoint + " is not a loopback address: give " + f.secret_key_flag + " and " +
                                        f.others_flag + " (make keys with shoal-keygen), or pass --insecure to go "
                                        "without encryption or authentication");
  }
  if (f.insecure) spdlog::warn("INSECURE: this {} goes without encryption or authentication (--insecure)", f.role);
  return false;
}

StatusOr<std::shared_ptr<const crypto::AllowList>> LoadAllowList(const std::string& path, const std::string& who) {
  SHOAL_ASSIGN_OR_RETURN(crypto::AllowList list, crypto::AllowList::Load(path));
  if (list.size() == 0)
    return Status::FailedPrecondition("--allow-keys " + path + " holds no keys, so no " + who + " could connect");
  return std::make_shared<const crypto::AllowList>(std::move(list));
}

}  // namespace shoal::transport
