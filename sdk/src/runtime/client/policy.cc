#include "runtime/client/policy.h"

#include <cmath>
#include <string>

#include "crypto/keys.h"

namespace shoal::runtime {

namespace {

std::string Num(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

Status ValidatePrivacyPolicy(const ClientOptions& o) {
  const ClientPrivacyPolicy& p = o.privacy;
  if (!std::isfinite(p.min_noise_multiplier) || p.min_noise_multiplier < 0)
    return Status::InvalidArgument("--min-noise must be a finite number >= 0");
  if (!std::isfinite(p.max_clip) || p.max_clip < 0) return Status::InvalidArgument("--max-clip must be a finite number >= 0");
  if (!std::isfinite(p.colluding_fraction) || p.colluding_fraction < 0 || p.colluding_fraction >= 1)
    return Status::InvalidArgument("--secagg-colluding must be in [0, 1)");
  if (p.min_neighbours == 0 || p.min_threshold == 0 || p.min_roster == 0)
    return Status::InvalidArgument("--min-neighbours, --min-threshold and --min-roster must be at least 1");
  if (p.min_threshold > p.min_neighbours && p.min_neighbours > 1)
    return Status::InvalidArgument("--min-threshold " + std::to_string(p.min_threshold) + " exceeds --min-neighbours " +
                                   std::to_string(p.min_neighbours) + ": t shares come from the k neighbours");
  if (p.trusted_roster.empty()) return Status::Ok();
  // The other members know this client by the identity in its key file: a fresh identity per
  // registration could not be in their rosters.
  if (o.secret_key_file.empty())
    return Status::InvalidArgument("--trusted-roster needs --secret-key: the roster's members know each other by the "
                                   "keys in their key files (shoal-keygen)");
  SHOAL_RETURN_IF_ERROR(SecAggPolicy(p).status());
  return Status::Ok();
}

Status CheckTaskPrivacy(const ClientPrivacyPolicy& p, const protocol::PrivacyConfig& task) {
  const bool dp = task.dp_clip > 0;
  if (p.require_secagg && !task.secagg)
    return Status::FailedPrecondition("the aggregator's task sends updates without secure aggregation, which this client "
                                      "requires (--require-secagg); refusing the task");
  if (p.min_noise_multiplier > 0 && (!dp || task.dp_noise_multiplier < p.min_noise_multiplier))
    return Status::FailedPrecondition(
        (dp ? "the aggregator's task adds distributed DP noise with multiplier z = " + Num(task.dp_noise_multiplier)
            : std::string("the aggregator's task adds no distributed DP noise")) +
        ", below this client's minimum z = " + Num(p.min_noise_multiplier) + " (--min-noise); refusing the task");
  if (p.max_clip > 0 && (!dp || task.dp_clip > p.max_clip))
    return Status::FailedPrecondition(
        (dp ? "the aggregator's task clips updates to L2 norm C = " + Num(task.dp_clip)
            : std::string("the aggregator's task does not clip updates (no DP)")) +
        ", above this client's maximum C = " + Num(p.max_clip) + " (--max-clip); refusing the task");
  return Status::Ok();
}

StatusOr<privacy::secagg::ClientPolicy> SecAggPolicy(const ClientPrivacyPolicy& p) {
  privacy::secagg::ClientPolicy out;
  out.min_degree = p.min_neighbours;
  out.min_threshold = p.min_threshold;
  out.min_roster = p.min_roster;
  out.colluding_fraction = p.colluding_fraction;
  if (p.trusted_roster.empty()) return out;
  auto list = crypto::AllowList::Load(p.trusted_roster);
  if (!list.ok()) return list.status().WithContext("--trusted-roster");
  if (list->size() == 0)
    return Status::InvalidArgument("--trusted-roster " + p.trusted_roster + " holds no keys");
  auto trusted = std::make_shared<privacy::secagg::TrustedKeys>();
  for (const std::string& z85 : list->keys()) {
    privacy::secagg::Key32 key{};
    SHOAL_RETURN_IF_ERROR(crypto::Z85DecodeTo(z85, key));
    trusted->insert(key);
  }
  out.trusted = std::move(trusted);
  return out;
}

}  // namespace shoal::runtime
