#include "nn/model_spec.h"

#include <charconv>

namespace shoal::nn {
namespace {

Status SpecError(const std::string& text, const std::string& why) {
  return Status::InvalidArgument("bad model spec '" + text + "': " + why);
}

// Splits "a,b,c" on commas, keeping empty items so that "64,,32" can be refused.
std::vector<std::string_view> SplitCommas(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

StatusOr<ModelSpec> ParseModelSpec(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const bool has_args = colon != std::string::npos;

  ModelSpec spec;
  spec.kind = kind;
  if (kind == "linear") {
    if (has_args) return SpecError(text, "'linear' takes no options (it has no hidden layer)");
    return spec;
  }
  if (kind != "mlp") {
    return SpecError(text, "unknown model kind '" + kind + "': expected 'mlp', 'mlp:H1,H2,...' or 'linear'");
  }
  if (!has_args) {
    spec.hidden = {kDefaultHiddenWidth};
    return spec;
  }

  const std::string_view args = std::string_view(text).substr(colon + 1);
  if (args.empty()) return SpecError(text, "expected hidden widths after 'mlp:', e.g. 'mlp:128,64'");
  bool seen_act = false;
  for (std::string_view item : SplitCommas(args)) {
    if (item.empty()) return SpecError(text, "empty item in the comma-separated list");
    const size_t eq = item.find('=');
    if (eq != std::string_view::npos) {
      // A key=value option. Only act= exists today.
      const std::string key(item.substr(0, eq));
      const std::string value(item.substr(eq + 1));
      if (key != "act") return SpecError(text, "unknown option '" + key + "': expected act=relu or act=gelu");
      if (seen_act) return SpecError(text, "act= given twice");
      if (value != "relu" && value != "gelu")
        return SpecError(text, "unknown activation '" + value + "': expected relu or gelu");
      spec.activation = value;
      seen_act = true;
      continue;
    }
    if (seen_act) return SpecError(text, "hidden widths must come before act=");
    int width = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), width);
    if (ec == std::errc::result_out_of_range)
      return SpecError(text, "hidden width '" + std::string(item) + "' is too large (at most " +
                                 std::to_string(kMaxHiddenWidth) + ")");
    if (ec != std::errc() || end != item.data() + item.size() || width <= 0)
      return SpecError(text, "hidden width must be a positive integer, got '" + std::string(item) + "'");
    if (width > kMaxHiddenWidth)
      return SpecError(text, "hidden width " + std::to_string(width) + " is too large (at most " +
                                 std::to_string(kMaxHiddenWidth) + ")");
    spec.hidden.push_back(width);
    if (spec.hidden.size() > kMaxHiddenLayers)
      return SpecError(text, "more than " + std::to_string(kMaxHiddenLayers) + " hidden layers");
  }
  // "mlp:act=gelu": the default widths with another activation.
  if (spec.hidden.empty()) spec.hidden = {kDefaultHiddenWidth};
  return spec;
}

std::string ModelSpecToString(const ModelSpec& spec) {
  if (spec.kind != "mlp") return spec.kind;
  std::string s = "mlp";
  char sep = ':';
  for (int w : spec.hidden) {
    s += sep;
    s += std::to_string(w);
    sep = ',';
  }
  if (spec.activation != "relu") {
    s += sep;
    s += "act=" + spec.activation;
  }
  return s;
}

}  // namespace shoal::nn
