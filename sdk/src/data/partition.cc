// The held-out split and the partitioners of feature datasets (token datasets are handed to
// token_partition.cc). Every random choice comes from shoal::Rng with a fixed stream per
// purpose, so each process that knows (labels, scheme, seed) derives the very same split and
// parts without talking to the others.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <string_view>

#include "core/rng.h"
#include "data/tokens.h"
#include "shoal/data.h"

namespace shoal::data {
namespace {

// Rng streams: one per purpose, so e.g. changing the partition scheme never changes the split.
constexpr uint64_t kSplitStream = 0x53504c4954;      // "SPLIT"
constexpr uint64_t kIidStream = 0x494944;            // "IID"
constexpr uint64_t kDirichletStream = 0x4449524943;  // "DIRIC"

// How many times Dirichlet redraws the whole assignment before giving up on min_per_part.
constexpr int kMaxDirichletDraws = 1000;

constexpr const char* kSchemes = "valid schemes: iid, dirichlet:ALPHA with ALPHA > 0 (e.g. dirichlet:0.5)";

// OK when every label lies in [0, num_classes).
Status CheckLabels(const std::vector<int32_t>& labels, int32_t num_classes) {
  if (num_classes <= 0) return Status::InvalidArgument("num_classes must be positive, got " + std::to_string(num_classes));
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes) {
      return Status::InvalidArgument("label " + std::to_string(labels[i]) + " of example " + std::to_string(i) +
                                     " is outside [0, " + std::to_string(num_classes) + ")");
    }
  }
  return Status::Ok();
}

// Example indices grouped by label, each group ascending.
std::vector<std::vector<int64_t>> GroupByClass(const std::vector<int32_t>& labels, int32_t num_classes) {
  std::vector<std::vector<int64_t>> by_class(static_cast<size_t>(num_classes));
  for (size_t i = 0; i < labels.size(); ++i) by_class[static_cast<size_t>(labels[i])].push_back(static_cast<int64_t>(i));
  return by_class;
}

// Parses all of `s` as a decimal unsigned 32-bit number: no sign, no spaces.
bool ParseU32(std::string_view s, uint32_t* out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// "iid": a seeded shuffle, then contiguous parts whose sizes differ by at most one.
std::vector<std::vector<int64_t>> IidParts(size_t n, uint32_t count, uint64_t seed) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Rng rng(seed, kIidStream);
  rng.Shuffle(std::span<int64_t>(perm));

  std::vector<std::vector<int64_t>> parts(count);
  const size_t base = n / count, extra = n % count;
  size_t start = 0;
  for (size_t p = 0; p < count; ++p) {
    const size_t size = base + (p < extra ? 1 : 0);  // the first n % count parts get one more
    parts[p].assign(perm.begin() + static_cast<ptrdiff_t>(start), perm.begin() + static_cast<ptrdiff_t>(start + size));
    start += size;
  }
  return parts;
}

// Fills `p` with one draw of Dir(alpha, ..., alpha) (independent Gamma(alpha) variates,
// normalized), restricted to the parts where open[j] is true: the others get 0 and the rest
// is renormalized. Every part's variate is drawn either way, so the random stream does not
// depend on which parts are open. When nothing is left to normalize (all open variates
// underflowed to 0, which happens for a tiny alpha) the draw becomes one-hot on a random open
// part: the limit of the distribution as alpha -> 0.
void DrawDirichlet(Rng& rng, double alpha, const std::vector<bool>& open, std::vector<double>* p) {
  double sum = 0.0;
  for (size_t j = 0; j < p->size(); ++j) {
    const double g = rng.Gamma(alpha);
    (*p)[j] = open[j] ? g : 0.0;
    sum += (*p)[j];
  }
  if (sum > 0.0 && std::isfinite(sum)) {
    for (double& v : *p) v /= sum;
    return;
  }
  std::vector<size_t> candidates;
  for (size_t j = 0; j < open.size(); ++j)
    if (open[j]) candidates.push_back(j);
  std::fill(p->begin(), p->end(), 0.0);
  (*p)[candidates[static_cast<size_t>(rng.Below(candidates.size()))]] = 1.0;
}

// "dirichlet:ALPHA", the recipe of the usual FL benchmark code (Hsu et al. 2019, NIID-Bench):
// classes in order; for each, shuffle its examples, draw proportions ~ Dir(alpha) over the
// parts, set to 0 the proportion of every part that already holds n / count examples or more
// (so no part grows far beyond its fair share), renormalize, and cut the class into runs at
// floor(cumsum(p) * class_size). The whole assignment is redrawn until every part holds at
// least min_per_part examples.
StatusOr<std::vector<std::vector<int64_t>>> DirichletParts(const std::vector<int32_t>& labels, int32_t num_classes,
                                                           uint32_t count, double alpha, uint64_t seed,
                                                           int64_t min_per_part, const std::string& scheme) {
  const std::vector<std::vector<int64_t>> by_class = GroupByClass(labels, num_classes);
  const double fair_share = static_cast<double>(labels.size()) / static_cast<double>(count);
  Rng rng(seed, kDirichletStream);
  std::vector<double> p(count);
  std::vector<bool> open(count);
  std::vector<int64_t> idx;

  for (int draw = 0; draw < kMaxDirichletDraws; ++draw) {
    std::vector<std::vector<int64_t>> parts(count);
    for (const std::vector<int64_t>& members : by_class) {
      if (members.empty()) continue;
      idx = members;
      rng.Shuffle(std::span<int64_t>(idx));
      // A part is open while it holds less than its fair share. Some part always is: the
      // parts hold fewer than n examples in all while a class remains to be placed.
      for (uint32_t j = 0; j < count; ++j) open[j] = static_cast<double>(parts[j].size()) < fair_share;
      DrawDirichlet(rng, alpha, open, &p);
      const auto nc = static_cast<int64_t>(idx.size());
      double cum = 0.0;
      int64_t start = 0;
      for (uint32_t j = 0; j < count; ++j) {
        cum += p[j];
        int64_t end = (j + 1 == count) ? nc : std::min(nc, static_cast<int64_t>(cum * static_cast<double>(nc)));
        end = std::max(end, start);
        parts[j].insert(parts[j].end(), idx.begin() + start, idx.begin() + end);
        start = end;
      }
    }
    const bool enough = std::all_of(parts.begin(), parts.end(), [&](const std::vector<int64_t>& part) {
      return static_cast<int64_t>(part.size()) >= min_per_part;
    });
    if (enough) return parts;
  }
  return Status::InvalidArgument("partition scheme '" + scheme + "' gave some of the " + std::to_string(count) +
                                 " parts fewer than " + std::to_string(min_per_part) + " examples in " +
                                 std::to_string(kMaxDirichletDraws) +
                                 " draws; use a larger ALPHA, fewer parts or a smaller min_per_part");
}

}  // namespace

StatusOr<Split> TrainTestSplit(const Dataset& d, double test_fraction, uint64_t seed) {
  if (!(test_fraction >= 0.0 && test_fraction < 1.0)) {
    return Status::InvalidArgument("test fraction must be in [0, 1), got " + std::to_string(test_fraction));
  }
  if (d.kind == DatasetKind::kTokens) return SplitTokens(d, test_fraction);
  if (d.n <= 0 || static_cast<size_t>(d.n) != d.y.size() ||
      d.x.size() != static_cast<size_t>(d.n) * static_cast<size_t>(d.dim)) {
    return Status::InvalidArgument("dataset '" + d.name + "' is empty or inconsistent (n=" + std::to_string(d.n) +
                                   ", " + std::to_string(d.y.size()) + " labels, " + std::to_string(d.x.size()) +
                                   " features for dim " + std::to_string(d.dim) + ")");
  }
  SHOAL_RETURN_IF_ERROR(CheckLabels(d.y, d.num_classes).WithContext("dataset '" + d.name + "'"));

  // Within each class: shuffle, then the first round(fraction * size) go to test.
  std::vector<std::vector<int64_t>> by_class = GroupByClass(d.y, d.num_classes);
  Rng rng(seed, kSplitStream);
  std::vector<int64_t> train, test;
  for (std::vector<int64_t>& members : by_class) {
    rng.Shuffle(std::span<int64_t>(members));
    const auto k = static_cast<size_t>(std::llround(test_fraction * static_cast<double>(members.size())));
    test.insert(test.end(), members.begin(), members.begin() + static_cast<ptrdiff_t>(k));
    train.insert(train.end(), members.begin() + static_cast<ptrdiff_t>(k), members.end());
  }
  if (train.empty()) {
    return Status::InvalidArgument("test fraction " + std::to_string(test_fraction) + " leaves no training examples in '" +
                                   d.name + "'");
  }
  // Both halves keep the dataset's order.
  std::sort(train.begin(), train.end());
  std::sort(test.begin(), test.end());
  return Split{Subset(d, train), Subset(d, test)};
}

StatusOr<PartitionRef> ParsePartition(const std::string& text) {
  const std::string expected = "partition '" + text + "': expected i/n with 0 <= i < n (0-based, e.g. 0/4 ... 3/4)";
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return Status::InvalidArgument(expected);
  PartitionRef ref;
  const std::string_view s(text);
  if (!ParseU32(s.substr(0, slash), &ref.index) || !ParseU32(s.substr(slash + 1), &ref.count)) {
    return Status::InvalidArgument(expected);
  }
  if (ref.count == 0 || ref.index >= ref.count) return Status::InvalidArgument(expected);
  return ref;
}

StatusOr<std::vector<std::vector<int64_t>>> Partition(const std::vector<int32_t>& labels, int32_t num_classes,
                                                      uint32_t count, const std::string& scheme, uint64_t seed,
                                                      int64_t min_per_part) {
  if (count == 0) return Status::InvalidArgument("number of parts must be at least 1");
  if (min_per_part < 0) return Status::InvalidArgument("min_per_part must be >= 0, got " + std::to_string(min_per_part));
  if (labels.empty()) return Status::InvalidArgument("cannot partition an empty dataset");
  SHOAL_RETURN_IF_ERROR(CheckLabels(labels, num_classes));
  const auto n = static_cast<int64_t>(labels.size());
  if (min_per_part > 0 && n / min_per_part < static_cast<int64_t>(count)) {
    return Status::InvalidArgument(std::to_string(n) + " examples cannot give " + std::to_string(count) +
                                   " parts of at least " + std::to_string(min_per_part) + " each");
  }

  std::vector<std::vector<int64_t>> parts;
  if (scheme == "iid") {
    parts = IidParts(labels.size(), count, seed);
  } else if (scheme.starts_with("dirichlet:")) {
    const std::string_view a = std::string_view(scheme).substr(10);
    double alpha = 0.0;
    const char* end = a.data() + a.size();
    auto [ptr, ec] = std::from_chars(a.data(), end, alpha);
    if (a.empty() || ec != std::errc() || ptr != end || !std::isfinite(alpha) || !(alpha > 0.0)) {
      return Status::InvalidArgument("partition scheme '" + scheme + "': ALPHA must be a positive number; " + kSchemes);
    }
    SHOAL_ASSIGN_OR_RETURN(parts, DirichletParts(labels, num_classes, count, alpha, seed, min_per_part, scheme));
  } else if (scheme == "books") {
    return Status::InvalidArgument("partition scheme 'books' gives each part whole documents of a token dataset "
                                   "(kjv, text:PATH); this dataset holds labelled features; " + std::string(kSchemes));
  } else {
    return Status::InvalidArgument("unknown partition scheme '" + scheme + "'; " + kSchemes);
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

namespace {

// The training parts of a token split: contiguous runs of its training stream.
StatusOr<std::vector<Dataset>> TokenParts(const Dataset& train, uint32_t count, const std::string& scheme,
                                          int64_t min_per_part) {
  SHOAL_ASSIGN_OR_RETURN(std::vector<TokenRange> ranges, PartitionTokens(train, count, scheme, min_per_part));
  std::vector<Dataset> out;
  out.reserve(ranges.size());
  for (const TokenRange& r : ranges) out.push_back(Slice(train, r.begin, r.end));
  return out;
}

}  // namespace

StatusOr<std::vector<Dataset>> TrainingParts(const Split& split, uint64_t seed, uint32_t count,
                                             const std::string& scheme, int64_t min_per_part) {
  if (split.train.kind == DatasetKind::kTokens) return TokenParts(split.train, count, scheme, min_per_part);
  SHOAL_ASSIGN_OR_RETURN(auto parts, Partition(split.train.y, split.train.num_classes, count, scheme, seed, min_per_part));
  std::vector<Dataset> out;
  out.reserve(parts.size());
  for (const auto& indices : parts) out.push_back(Subset(split.train, indices));
  return out;
}

StatusOr<Dataset> TrainingPart(const Split& split, uint64_t seed, PartitionRef part, const std::string& scheme,
                               int64_t min_per_part) {
  if (part.count == 0 || part.index >= part.count)
    return Status::InvalidArgument("partition " + std::to_string(part.index) + "/" + std::to_string(part.count) +
                                   " does not exist (expected i/n with 0 <= i < n)");
  if (split.train.kind == DatasetKind::kTokens) {
    SHOAL_ASSIGN_OR_RETURN(std::vector<TokenRange> ranges,
                           PartitionTokens(split.train, part.count, scheme, min_per_part));
    return Slice(split.train, ranges[part.index].begin, ranges[part.index].end);
  }
  SHOAL_ASSIGN_OR_RETURN(auto parts, Partition(split.train.y, split.train.num_classes, part.count, scheme, seed, min_per_part));
  return Subset(split.train, parts[part.index]);
}

StatusOr<std::vector<Dataset>> TrainingParts(const Dataset& d, double test_fraction, uint64_t seed, uint32_t count,
                                             const std::string& scheme, int64_t min_per_part) {
  SHOAL_ASSIGN_OR_RETURN(Split split, TrainTestSplit(d, test_fraction, seed));
  return TrainingParts(split, seed, count, scheme, min_per_part);
}

StatusOr<Dataset> TrainingPart(const Dataset& d, double test_fraction, uint64_t seed, PartitionRef part,
                               const std::string& scheme, int64_t min_per_part) {
  SHOAL_ASSIGN_OR_RETURN(Split split, TrainTestSplit(d, test_fraction, seed));
  return TrainingPart(split, seed, part, scheme, min_per_part);
}

}  // namespace shoal::data
