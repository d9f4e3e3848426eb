// DefaultDataDir, the dataset spec parser and Subset. The file formats live in loaders.cc,
// the split and the partitioners in partition.cc.

#include "shoal/data.h"

#include <pwd.h>
#include <unistd.h>

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

constexpr const char* kValidForms = "valid forms: digits, csv:PATH, idx:IMAGES,LABELS";

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
    const std::string path = spec.substr(4);
    if (path.empty()) return Status::InvalidArgument("dataset '" + spec + "': missing PATH in csv:PATH");
    return LoadCsv(path);
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
  if (spec == "kjv" || spec.starts_with("text:")) {
    return Status::InvalidArgument("dataset '" + spec +
                                   "' is a text dataset: it needs a language model (GPT), which this version of "
                                   "Shoal lacks; use a classification dataset (" +
                                   kValidForms + ")");
  }
  return Status::InvalidArgument("unknown dataset '" + spec + "'; " + kValidForms);
}

Dataset Subset(const Dataset& d, const std::vector<int64_t>& indices) {
  Dataset out;
  out.name = d.name;
  out.dim = d.dim;
  out.num_classes = d.num_classes;
  out.n = static_cast<int64_t>(indices.size());
  out.x.resize(indices.size() * static_cast<size_t>(d.dim));
  out.y.resize(indices.size());
  const size_t dim = static_cast<size_t>(d.dim);
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t r = indices[i];
    if (r < 0 || r >= d.n) {
      // A caller bug (indices come from Partition/TrainTestSplit of this very dataset), not a
      // data error: stop loudly rather than read out of bounds.
      std::fprintf(stderr, "shoal::data::Subset: index %lld out of range [0, %lld)\n", static_cast<long long>(r),
                   static_cast<long long>(d.n));
      std::abort();
    }
    if (dim != 0) std::memcpy(&out.x[i * dim], &d.x[static_cast<size_t>(r) * dim], dim * sizeof(float));
    out.y[i] = d.y[static_cast<size_t>(r)];
  }
  return out;
}

}  // namespace shoal::data
