#include "nn/gpt_spec.h"

#include <charconv>
#include <string_view>

namespace shoal::nn {
namespace {

struct Field {
  const char* key;
  int GptSpec::*value;
  int lo, hi;
};
constexpr Field kFields[] = {
    {"layers", &GptSpec::layers, 1, 64},
    {"dim", &GptSpec::dim, 1, 8192},
    {"heads", &GptSpec::heads, 1, 256},
    {"ctx", &GptSpec::ctx, 1, 4096},
};

}  // namespace

StatusOr<GptSpec> ParseGptSpec(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("bad model spec '" + text + "': " + why +
                                   " (expected gpt[:layers=L,dim=D,heads=H,ctx=T[,ckpt=1]])");
  };
  GptSpec spec;
  std::string_view rest(text);
  if (rest.substr(0, 3) != "gpt") return bad("not a gpt spec");
  rest.remove_prefix(3);
  if (rest.empty()) return spec;
  if (rest.front() != ':' || rest.size() == 1) return bad("expected ':' and settings after 'gpt'");
  rest.remove_prefix(1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) return bad("a trailing ','");
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return bad("'" + std::string(item) + "' is not key=value");
    const std::string key(item.substr(0, eq));
    const std::string_view digits = item.substr(eq + 1);
    int value = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
      return bad(key + "=" + std::string(digits) + " is not a whole number");
    if (key == "ckpt") {
      if (value != 0 && value != 1) return bad("ckpt must be 0 or 1");
      spec.checkpoint = value == 1;
      continue;
    }
    const Field* field = nullptr;
    for (const Field& f : kFields)
      if (key == f.key) field = &f;
    if (!field) return bad("unknown setting '" + key + "'");
    if (value < field->lo || value > field->hi)
      return bad(key + "=" + std::to_string(value) + " is outside [" + std::to_string(field->lo) + ", " +
                 std::to_string(field->hi) + "]");
    spec.*(field->value) = value;
  }
  if (spec.dim % spec.heads != 0)
    return bad("dim=" + std::to_string(spec.dim) + " is not a multiple of heads=" + std::to_string(spec.heads));
  return spec;
}

std::string GptSpecToString(const GptSpec& spec) {
  std::string out = "gpt:";
  for (const Field& f : kFields)
    out += std::string(out.size() > 4 ? "," : "") + f.key + "=" + std::to_string(spec.*(f.value));
  if (spec.checkpoint) out += ",ckpt=1";
  return out;
}

}  // namespace shoal::nn
