#include "privacy/secagg/graph.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.h"

namespace shoal::privacy::secagg {
namespace {

uint32_t SecureThreshold(uint32_t k, double corrupt) {
  return k / 2 + 1 + static_cast<uint32_t>(std::ceil(corrupt * k));
}
// Full graph: every client's neighbours are all the others, so a dropout rate d of them leaves
// exactly k (1 - d). Sparse: which clients drop is random, so a neighbourhood's survivors
// vary; three standard deviations of margin.
int64_t CorrectThreshold(uint32_t k, uint32_t n, double dropout) {
  const double kd = static_cast<double>(k);
  const double margin = k + 1 >= n ? 0.0 : 3 * std::sqrt(kd * dropout * (1 - dropout));
  return static_cast<int64_t>(std::floor(kd * (1 - dropout) - margin + 1e-9));
}

}  // namespace

StatusOr<Params> DeriveParams(uint32_t n, double dropout, double corrupt, uint32_t degree_override,
                              uint32_t threshold_override) {
  if (n < 2) return Status::FailedPrecondition("secure aggregation needs at least 2 clients, got " + std::to_string(n));
  if (!(dropout >= 0 && dropout < 1) || !(corrupt >= 0 && corrupt < 0.5))
    return Status::InvalidArgument("secure aggregation: dropout rate must be in [0, 1) and corrupt rate in [0, 0.5)");
  Params p;
  p.n = n;
  if (degree_override) {
    if (degree_override >= n) degree_override = n - 1;
    if (degree_override < n - 1 && degree_override % 2) ++degree_override;  // Harary graphs here have even degree
    p.degree = std::min(degree_override, n - 1);
  } else {
    uint32_t k = n <= 50 ? n - 1 : 2 * static_cast<uint32_t>(std::ceil(3.0 * std::log2(static_cast<double>(n))));
    while (k < n - 1 && static_cast<int64_t>(SecureThreshold(k, corrupt)) > CorrectThreshold(k, n, dropout))
      k = std::min(n - 1, 2 * k);
    p.degree = k;
  }
  const uint32_t secure = SecureThreshold(p.degree, corrupt);
  if (threshold_override) {
    if (threshold_override > p.degree)
      return Status::InvalidArgument("secure aggregation threshold " + std::to_string(threshold_override) +
                                     " exceeds the " + std::to_string(p.degree) + " neighbours");
    p.threshold = threshold_override;
  } else {
    if (static_cast<int64_t>(secure) > CorrectThreshold(p.degree, n, dropout) || secure > p.degree)
      return Status::InvalidArgument(
          "secure aggregation cannot tolerate dropout " + std::to_string(dropout) + " and corruption " +
          std::to_string(corrupt) + " with " + std::to_string(n) +
          " clients; lower them, or set --secagg-threshold (secure only against an honest-but-curious server "
          "below " + std::to_string(secure) + ")");
    p.threshold = secure;
  }
  p.malicious_secure = p.threshold >= secure;
  return p;
}

std::vector<uint32_t> Neighbours(uint32_t n, uint32_t degree, uint64_t seed, uint32_t node) {
  std::vector<uint32_t> out;
  if (node >= n) return out;
  if (degree + 1 >= n) {
    for (uint32_t v = 0; v < n; ++v)
      if (v != node) out.push_back(v);
    return out;
  }
  std::vector<uint32_t> order(n);  // ring position -> node
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(seed, 0x5ecA66);
  rng.Shuffle(std::span<uint32_t>(order));
  const uint32_t pos = static_cast<uint32_t>(std::find(order.begin(), order.end(), node) - order.begin());
  for (uint32_t d = 1; d <= degree / 2; ++d) {
    out.push_back(order[(pos + d) % n]);
    out.push_back(order[(pos + n - d) % n]);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace shoal::privacy::secagg
