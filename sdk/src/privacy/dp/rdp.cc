#include "privacy/dp/rdp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace shoal::privacy {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// log(exp(x) + exp(y)).
double LogAdd(double x, double y) {
  const double hi = std::max(x, y), lo = std::min(x, y);
  if (lo == kNegInf) return hi;
  return hi + std::log1p(std::exp(lo - hi));
}

// log(exp(x) - exp(y)) for x >= y; NaN when y > x (the series went negative: unusable order).
double LogSub(double x, double y) {
  if (y == kNegInf) return x;
  if (y > x) return std::nan("");
  if (y == x) return kNegInf;
  return x + std::log1p(-std::exp(y - x));
}

// log(erfc(x)), accurate where erfc underflows: the asymptotic series
// erfc(x) = exp(-x^2) / (x sqrt(pi)) * (1 - 1/(2x^2) + 3/(2x^2)^2 - 15/(2x^2)^3 + 105/(2x^2)^4)
// has a relative error below 1e-12 from x = 20 on.
double LogErfc(double x) {
  if (x < 20.0) return std::log(std::erfc(x));
  const double u = 1.0 / (2.0 * x * x);
  const double series = 1.0 - u * (1.0 - 3.0 * u * (1.0 - 5.0 * u * (1.0 - 7.0 * u)));
  return -x * x - std::log(x) - 0.5 * std::log(M_PI) + std::log(series);
}

double LogBinomial(double n, double k) { return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1); }

// log A_alpha for an integer order.
double LogAInteger(double q, double sigma, int alpha) {
  double log_a = kNegInf;
  const double lq = std::log(q), l1q = std::log1p(-q);
  for (int k = 0; k <= alpha; ++k) {
    const double term = LogBinomial(alpha, k) + k * lq + (alpha - k) * l1q +
                        (static_cast<double>(k) * k - k) / (2.0 * sigma * sigma);
    log_a = LogAdd(log_a, term);
  }
  return log_a;
}

// log A_alpha for a fractional order: the two tails of the paper's series (§3.3), split at
// z0 where the two Gaussians' densities weighted by q and 1-q cross.
double LogAFractional(double q, double sigma, double alpha) {
  double log_a0 = kNegInf, log_a1 = kNegInf;
  const double z0 = sigma * sigma * std::log(1.0 / q - 1.0) + 0.5;
  const double lq = std::log(q), l1q = std::log1p(-q);
  double log_coef = 0.0;  // log |C(alpha, i)|
  bool positive = true;   // the sign of C(alpha, i)
  for (int i = 0;; ++i) {
    const double j = alpha - i;
    const double log_t0 = log_coef + i * lq + j * l1q;
    const double log_t1 = log_coef + j * lq + i * l1q;
    const double log_e0 = std::log(0.5) + LogErfc((i - z0) / (M_SQRT2 * sigma));
    const double log_e1 = std::log(0.5) + LogErfc((z0 - j) / (M_SQRT2 * sigma));
    const double log_s0 = log_t0 + (static_cast<double>(i) * i - i) / (2.0 * sigma * sigma) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2.0 * sigma * sigma) + log_e1;
    if (positive) {
      log_a0 = LogAdd(log_a0, log_s0);
      log_a1 = LogAdd(log_a1, log_s1);
    } else {
      log_a0 = LogSub(log_a0, log_s0);
      log_a1 = LogSub(log_a1, log_s1);
    }
    if (std::isnan(log_a0) || std::isnan(log_a1)) return std::nan("");
    if (std::max(log_s0, log_s1) < -30.0 || i > 100000) break;
    // C(alpha, i+1) = C(alpha, i) * (alpha - i) / (i + 1).
    if (j == 0.0) break;  // every later binomial is 0
    log_coef += std::log(std::fabs(j)) - std::log(i + 1.0);
    if (j < 0.0) positive = !positive;
  }
  return LogAdd(log_a0, log_a1);
}

bool ValidRound(double q, double z) { return q >= 0.0 && q <= 1.0 && z > 0.0 && std::isfinite(z); }

}  // namespace

std::vector<double> DefaultOrders() {
  std::vector<double> orders;
  for (int x = 1; x < 100; ++x) orders.push_back(1.0 + x / 10.0);
  for (int a = 12; a < 64; ++a) orders.push_back(a);
  return orders;
}

double SampledGaussianRdp(double q, double sigma, double alpha) {
  if (!ValidRound(q, sigma) || !(alpha > 1.0)) return std::nan("");
  if (q == 0.0) return 0.0;
  if (q == 1.0) return alpha / (2.0 * sigma * sigma);
  if (std::isinf(alpha)) return std::numeric_limits<double>::infinity();
  const double log_a = alpha == std::floor(alpha) && alpha < 1e6 ? LogAInteger(q, sigma, static_cast<int>(alpha))
                                                                  : LogAFractional(q, sigma, alpha);
  return log_a / (alpha - 1.0);
}

StatusOr<Epsilon> EpsilonFromRdp(std::span<const double> orders, std::span<const double> rdp, double delta) {
  if (orders.size() != rdp.size() || orders.empty())
    return Status::InvalidArgument("RDP: need one value per order");
  if (!(delta > 0.0 && delta < 1.0)) return Status::InvalidArgument("delta must be in (0, 1)");
  Epsilon best{std::numeric_limits<double>::infinity(), orders[0]};
  for (size_t i = 0; i < orders.size(); ++i) {
    const double a = orders[i];
    if (!(a > 1.0)) return Status::InvalidArgument("RDP orders must be above 1");
    if (std::isnan(rdp[i]) || std::isinf(rdp[i])) continue;
    const double eps = rdp[i] + std::log1p(-1.0 / a) - (std::log(delta) + std::log(a)) / (a - 1.0);
    if (eps < best.epsilon) best = {eps, a};
  }
  best.epsilon = std::max(best.epsilon, 0.0);
  return best;
}

RdpAccountant::RdpAccountant(std::vector<double> orders) : orders_(std::move(orders)), rdp_(orders_.size(), 0.0) {}

Status RdpAccountant::Compose(double q, double z, uint64_t steps) {
  if (!ValidRound(q, z))
    return Status::InvalidArgument("RDP accountant: sampling rate must be in [0, 1] and the noise multiplier positive");
  for (size_t i = 0; i < orders_.size(); ++i) {
    const double r = SampledGaussianRdp(q, z, orders_[i]);
    rdp_[i] = std::isnan(r) ? std::numeric_limits<double>::infinity() : rdp_[i] + static_cast<double>(steps) * r;
  }
  rounds_ += steps;
  return Status::Ok();
}

StatusOr<Epsilon> RdpAccountant::Spent(double delta) const { return EpsilonFromRdp(orders_, rdp_, delta); }

StatusOr<Epsilon> RdpAccountant::SpentAfter(double q, double z, uint64_t steps, double delta) const {
  RdpAccountant next = *this;
  SHOAL_RETURN_IF_ERROR(next.Compose(q, z, steps));
  return next.Spent(delta);
}

std::string RdpAccountant::Save() const {
  std::ostringstream out;
  out << "rdp1 " << rounds_ << ' ' << orders_.size();
  char buf[64];
  for (size_t i = 0; i < orders_.size(); ++i) {
    std::snprintf(buf, sizeof buf, " %a %a", orders_[i], rdp_[i]);  // hex floats round-trip exactly
    out << buf;
  }
  return out.str();
}

Status RdpAccountant::Load(const std::string& state) {
  std::istringstream in(state);
  std::string tag;
  uint64_t rounds = 0;
  size_t n = 0;
  if (!(in >> tag >> rounds >> n) || tag != "rdp1" || n != orders_.size())
    return Status::Corruption("RDP accountant state is not of this version or order set");
  std::vector<double> rdp(n);
  for (size_t i = 0; i < n; ++i) {
    std::string a, r;
    if (!(in >> a >> r)) return Status::Corruption("RDP accountant state is truncated");
    const double order = std::strtod(a.c_str(), nullptr);
    rdp[i] = std::strtod(r.c_str(), nullptr);
    if (order != orders_[i] || !(rdp[i] >= 0.0))
      return Status::Corruption("RDP accountant state has another order set or a negative value");
  }
  rdp_ = std::move(rdp);
  rounds_ = rounds;
  return Status::Ok();
}

StatusOr<double> NoiseMultiplierFor(double target_epsilon, double delta, double q, uint64_t steps) {
  if (!(target_epsilon > 0.0) || !std::isfinite(target_epsilon))
    return Status::InvalidArgument("target epsilon must be a positive number");
  if (!(q > 0.0 && q <= 1.0)) return Status::InvalidArgument("sampling rate must be in (0, 1]");
  if (steps == 0) return Status::InvalidArgument("a target epsilon needs a number of rounds");
  auto eps = [&](double z) -> StatusOr<double> {
    RdpAccountant a;
    SHOAL_RETURN_IF_ERROR(a.Compose(q, z, steps));
    SHOAL_ASSIGN_OR_RETURN(Epsilon e, a.Spent(delta));
    return e.epsilon;
  };
  double lo = 1e-2, hi = 1e4;
  SHOAL_ASSIGN_OR_RETURN(double at_hi, eps(hi));
  if (at_hi > target_epsilon)
    return Status::InvalidArgument("no noise multiplier up to 1e4 reaches epsilon " + std::to_string(target_epsilon));
  SHOAL_ASSIGN_OR_RETURN(double at_lo, eps(lo));
  if (at_lo <= target_epsilon) return lo;
  while (hi / lo - 1.0 > 1e-4) {
    const double mid = std::sqrt(lo * hi);
    SHOAL_ASSIGN_OR_RETURN(double e, eps(mid));
    (e > target_epsilon ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace shoal::privacy
