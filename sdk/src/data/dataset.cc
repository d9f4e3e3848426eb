// DefaultDataDir, the dataset spec parser, Subset and Slice. The file formats live in
// loaders.cc and text.cc, the split and the partitioners in partition.cc (features) and
// token_partition.cc (tokens).

#include "shoal/data.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "data/loaders.h"

namespace shoal::data {
namespace {

// The value of environment variable `name`, or "" when unset.
std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string JoinPath(const std::string& dir, const std::string& file) {
  if (dir.empty()) return file;
  return dir.back() == '/' ? dir + file : dir + "/" + file;
}

constexpr const char* kValidForms = "valid forms: digits, csv:PATH, idx:IMAGES,LABELS, kjv, text:PATH";

// A caller bug, not a data error: stop loudly rather than read out of bounds.
[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "shoal::data::%s\n", message.c_str());
  std::abort();
}

}  // namespace

std::string DefaultDataDir() {
  if (std::string dir = Env("SHOAL_DATA_DIR"); !dir.empty()) return dir;
  if (std::string dir = Env("XDG_CACHE_HOME"); !dir.empty()) return JoinPath(dir, "shoal");
  std::string home = Env("HOME");
  if (home.empty()) {
    // No $HOME (some service managers): ask the password database.
    if (const struct passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr) home = pw->pw_dir;
  }
  if (home.empty()) return ".cache/shoal";
  return JoinPath(home, ".cache/shoal");
}

StatusOr<Dataset> LoadDataset(const std::string& spec, const std::string& data_dir) {
  if (spec == "digits") {
    return LoadDigits(JoinPath(data_dir.empty() ? DefaultDataDir() : data_dir, "digits.csv.gz"));
  }
  if (spec.starts_with("csv:")) {
    // csv:PATH[,label=COL][,header=auto|yes|no][,skip=N]
    std::string rest = spec.substr(4);
    const size_t comma = rest.find(',');
    const std::string path = rest.substr(0, comma);
    if (path.empty()) return Status::InvalidArgument("dataset '" + spec + "': missing PATH in csv:PATH");
    CsvOptions options;
    for (size_t at = comma; at != std::string::npos;) {
      const size_t next = rest.find(',', at + 1);
      const std::string option = rest.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
      at = next;
      const size_t eq = option.find('=');
      const std::string key = option.substr(0, eq), value = eq == std::string::npos ? "" : option.substr(eq + 1);
      if (key == "label" && !value.empty()) {
        options.label = value;
      } else if (key == "header" && (value == "auto" || value == "yes" || value == "no")) {
        options.header = value == "yes" ? CsvOptions::Header::kYes
                         : value == "no" ? CsvOptions::Header::kNo
                                         : CsvOptions::Header::kAuto;
      } else if (key == "skip" && !value.empty() && value.size() <= 9 &&
                 std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        options.skip = std::stoull(value);
      } else {
        return Status::InvalidArgument("dataset '" + spec + "': unknown option '" + option +
                                       "'; expected csv:PATH[,label=NAME_OR_COLUMN][,header=auto|yes|no][,skip=N]");
      }
    }
    return LoadCsv(path, options);
  }
  if (spec.starts_with("idx:")) {
    const std::string rest = spec.substr(4);
    const size_t comma = rest.find(',');
    if (comma == std::string::npos || comma == 0 || comma + 1 == rest.size() ||
        rest.find(',', comma + 1) != std::string::npos) {
      return Status::InvalidArgument("dataset '" + spec +
                                     "': expected idx:IMAGES,LABELS (two paths separated by one comma)");
    }
    return LoadIdx(rest.substr(0, comma), rest.substr(comma + 1));
  }
  if (spec == "kjv") return LoadKjv(JoinPath(data_dir.empty() ? DefaultDataDir() : data_dir, "kjv.txt"));
  if (spec.starts_with("text:")) {
    const std::string path = spec.substr(5);
    if (path.empty()) return Status::InvalidArgument("dataset '" + spec + "': missing PATH in text:PATH");
    return LoadText(path);
  }
  return Status::InvalidArgument("unknown dataset '" + spec + "'; " + kValidForms);
}

StatusOr<bool> WantsStandardization(const std::string& setting, const std::string& spec) {
  if (setting == "on") return true;
  if (setting == "off") return false;
  if (setting == "auto") return spec.starts_with("csv:");
  return Status::InvalidArgument("--standardize must be auto, on or off (got '" + setting + "')");
}

Standardization FitStandardization(const Dataset& train) {
  const size_t dim = static_cast<size_t>(train.dim);
  std::vector<double> sum(dim, 0.0), sum_sq(dim, 0.0);
  for (int64_t i = 0; i < train.n; ++i) {
    const float* row = &train.x[static_cast<size_t>(i) * dim];
    for (size_t j = 0; j < dim; ++j) sum[j] += row[j];
  }
  const double n = static_cast<double>(std::max<int64_t>(train.n, 1));
  Standardization s;
  s.mean.resize(dim);
  s.scale.resize(dim);
  for (size_t j = 0; j < dim; ++j) s.mean[j] = static_cast<float>(sum[j] / n);
  // Two passes (deviations from the float mean): no cancellation for features far from 0.
  for (int64_t i = 0; i < train.n; ++i) {
    const float* row = &train.x[static_cast<size_t>(i) * dim];
    for (size_t j = 0; j < dim; ++j) {
      const double dev = static_cast<double>(row[j]) - s.mean[j];
      sum_sq[j] += dev * dev;
    }
  }
  for (size_t j = 0; j < dim; ++j) {
    const double sd = std::sqrt(sum_sq[j] / n);
    s.scale[j] = sd > 1e-12 && std::isfinite(1.0 / sd) ? static_cast<float>(1.0 / sd) : 1.0f;
  }
  return s;
}

Status Standardize(const Standardization& s, Dataset* d) {
  if (d->kind != DatasetKind::kFeatures)
    return Status::InvalidArgument("dataset '" + d->name + "' holds tokens: only features are standardized");
  const size_t dim = static_cast<size_t>(d->dim);
  if (s.mean.size() != dim || s.scale.size() != dim)
    return Status::InvalidArgument("standardization of " + std::to_string(s.mean.size()) + " features for dataset '" +
                                   d->name + "' of " + std::to_string(dim));
  for (size_t i = 0; i < d->x.size(); ++i) {
    const size_t j = i % dim;
    d->x[i] = (d->x[i] - s.mean[j]) * s.scale[j];
  }
  return Status::Ok();
}

double MajorityClassRate(const Dataset& d) {
  if (d.y.empty()) return 0.0;
  std::vector<int64_t> count(static_cast<size_t>(std::max(d.num_classes, 1)), 0);
  for (int32_t y : d.y)
    if (y >= 0 && y < d.num_classes) ++count[static_cast<size_t>(y)];
  return static_cast<double>(*std::max_element(count.begin(), count.end())) / static_cast<double>(d.y.size());
}

Status RequireFeatures(const Dataset& d, const std::string& who) {
  if (d.kind == DatasetKind::kFeatures) return Status::Ok();
  return Status::InvalidArgument("dataset '" + d.name + "' holds tokens (byte-level text, vocabulary " +
                                 std::to_string(d.vocab_size) + "); " + who +
                                 " needs features and labels");
}

Dataset Subset(const Dataset& d, const std::vector<int64_t>& indices) {
  if (d.kind != DatasetKind::kFeatures) Die("Subset of token dataset '" + d.name + "' (use Slice)");
  Dataset out;
  out.name = d.name;
  out.dim = d.dim;
  out.num_classes = d.num_classes;
  out.feature_names = d.feature_names;
  out.class_names = d.class_names;
  out.n = static_cast<int64_t>(indices.size());
  out.x.resize(indices.size() * static_cast<size_t>(d.dim));
  out.y.resize(indices.size());
  const size_t dim = static_cast<size_t>(d.dim);
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t r = indices[i];
    if (r < 0 || r >= d.n) {
      // A caller bug (indices come from Partition/TrainTestSplit of this very dataset), not a
      // data error: stop loudly rather than read out of bounds.
      Die("Subset: index " + std::to_string(r) + " out of range [0, " + std::to_string(d.n) + ")");
    }
    if (dim != 0) std::memcpy(&out.x[i * dim], &d.x[static_cast<size_t>(r) * dim], dim * sizeof(float));
    out.y[i] = d.y[static_cast<size_t>(r)];
  }
  return out;
}

Dataset Slice(const Dataset& d, int64_t begin, int64_t end) {
  if (d.kind != DatasetKind::kTokens) Die("Slice of feature dataset '" + d.name + "' (use Subset)");
  if (begin < 0 || begin > end || end > d.n || static_cast<size_t>(d.n) != d.tokens.size())
    Die("Slice: [" + std::to_string(begin) + ", " + std::to_string(end) + ") is not within the " +
        std::to_string(d.n) + " tokens of '" + d.name + "'");
  Dataset out;
  out.name = d.name;
  out.kind = DatasetKind::kTokens;
  out.vocab_size = d.vocab_size;
  out.n = end - begin;
  out.tokens.assign(d.tokens.begin() + begin, d.tokens.begin() + end);
  // Documents that overlap [begin, end): the one holding `begin` starts at 0, the others at
  // their own start minus begin. An empty slice has none.
  for (size_t i = 0; i < d.documents.size() && begin < end; ++i) {
    const int64_t doc_begin = d.documents[i].start;
    const int64_t doc_end = i + 1 < d.documents.size() ? d.documents[i + 1].start : d.n;
    if (doc_end <= begin || doc_begin >= end) continue;
    out.documents.push_back(Document{d.documents[i].name, std::max(doc_begin, begin) - begin});
  }
  return out;
}

}  // namespace shoal::data
