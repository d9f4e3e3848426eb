// The codec stage registry: the table of stage declarations (each defined in its stage's own
// file, listed here once), parameter checking against a declaration, and the help text.
#include "codec/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>

#include "codec/stages.h"

namespace shoal::codec {

// Ordered by slot, then as the slot's stages have always been listed.
constexpr const StageDecl* kStages[] = {
    &kErrorFeedbackStage,               // error feedback
    &kDctStage,   &kPowerSgdStage,      // transforms
    &kTopKStage,  &kRandKStage,         // selectors
    &kFp16Stage,  &kBf16Stage,  &kInt8Stage, &kQsgdStage, &kSignStage,  // quantizers
    &kZstdStage,                        // pack
};

constexpr const PresetDecl* kPresets[] = {&kDemoPreset};

std::span<const StageDecl* const> Stages() { return kStages; }
std::span<const PresetDecl* const> Presets() { return kPresets; }

const StageDecl* FindStage(std::string_view name) {
  for (const StageDecl* d : kStages) {
    if (d->name == name) return d;
  }
  return nullptr;
}

const ParamDecl* FindParam(const StageDecl& stage, std::string_view key) {
  for (const ParamDecl& p : stage.params) {
    if (p.name == key) return &p;
  }
  return nullptr;
}

const char* SlotName(Slot slot) {
  switch (slot) {
    case Slot::kErrorFeedback: return "error-feedback";
    case Slot::kTransform: return "transform";
    case Slot::kSelect: return "select";
    case Slot::kQuantize: return "quantize";
    case Slot::kPack: return "pack";
  }
  return "?";
}

namespace {

std::string FormatDouble(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, end);
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// Parses one value of `p`; InvalidArgument quoting the declared range.
Status ParseValue(std::string_view stage, const ParamDecl& p, const std::string& v, int64_t* i, double* d) {
  const char* first = v.data();
  const char* last = v.data() + v.size();
  bool ok = !v.empty();
  if (p.type == ParamType::kDouble) {
    auto [end, ec] = std::from_chars(first, last, *d);
    ok = ok && ec == std::errc() && end == last && std::isfinite(*d) &&
         (p.lo_open ? *d > p.double_lo : *d >= p.double_lo) && (p.hi_open ? *d < p.double_hi : *d <= p.double_hi);
  } else {
    auto [end, ec] = std::from_chars(first, last, *i);
    ok = ok && ec == std::errc() && end == last && *i >= p.int_lo && *i <= p.int_hi;
  }
  if (ok) return Status::Ok();
  return Status::InvalidArgument(std::string(stage) + ": bad value " + Quote(v) + " for " + Quote(p.name) + " (expected " +
                                 (p.type == ParamType::kDouble ? "a number" : "an integer") + " in " + RangeText(p) + ")");
}

}  // namespace

std::string RangeText(const ParamDecl& p) {
  if (p.type == ParamType::kDouble) {
    return (p.lo_open ? "(" : "[") + FormatDouble(p.double_lo) + ", " + FormatDouble(p.double_hi) + (p.hi_open ? ")" : "]");
  }
  return "[" + std::to_string(p.int_lo) + ", " + std::to_string(p.int_hi) + "]";
}

std::string DefaultText(const ParamDecl& p) {
  if (!p.has_default) return "";
  return p.type == ParamType::kDouble ? FormatDouble(p.double_default) : std::to_string(p.int_default);
}

StatusOr<StageParams> StageParams::Parse(std::string_view stage, std::span<const ParamDecl> decls, const StageSpec& spec) {
  StageParams out;
  out.stage_ = std::string(stage);
  out.decls_ = decls;
  out.values_.resize(decls.size());
  // Unknown or repeated names first, then exclusive pairs, then values in declaration order.
  std::vector<const std::string*> given(decls.size(), nullptr);
  std::vector<bool> excluded(decls.size(), false);
  for (const auto& [key, value] : spec.params) {
    size_t j = 0;
    while (j < decls.size() && decls[j].name != key) ++j;
    if (j == decls.size()) {
      std::string valid;
      for (const ParamDecl& p : decls) valid += (valid.empty() ? "" : ", ") + std::string(p.name);
      return Status::InvalidArgument(out.stage_ + ": unknown parameter " + Quote(key) + " (valid: " +
                                     (valid.empty() ? "none" : valid) + ")");
    }
    if (given[j]) return Status::InvalidArgument(out.stage_ + ": parameter " + Quote(key) + " given twice");
    given[j] = &value;
  }
  for (size_t j = 0; j < decls.size(); ++j) {
    const ParamDecl& p = decls[j];
    if (p.excludes.empty() || !given[out.Index(p.excludes)]) continue;
    if (given[j]) {
      return Status::InvalidArgument(out.stage_ + ": give either " + Quote(p.name) + " or " + Quote(p.excludes) +
                                     ", not both");
    }
    excluded[j] = true;
  }
  for (size_t j = 0; j < decls.size(); ++j) {
    const ParamDecl& p = decls[j];
    Value& v = out.values_[j];
    if (given[j]) {
      SHOAL_RETURN_IF_ERROR(ParseValue(stage, p, *given[j], &v.i, &v.d));
      v.present = true;
    } else if (p.has_default && !excluded[j]) {
      v = {true, p.int_default, p.double_default};
    }
  }
  return out;
}

size_t StageParams::Index(std::string_view key) const {
  for (size_t j = 0; j < decls_.size(); ++j) {
    if (decls_[j].name == key) return j;
  }
  std::abort();  // a stage reads a parameter it did not declare: a bug in the stage file
}

bool StageParams::Has(std::string_view key) const { return values_[Index(key)].present; }
int64_t StageParams::Int(std::string_view key) const { return values_[Index(key)].i; }
double StageParams::Double(std::string_view key) const { return values_[Index(key)].d; }

StageSpec StageParams::ToSpec() const {
  StageSpec s;
  s.name = stage_;
  for (size_t j = 0; j < decls_.size(); ++j) {
    const Value& v = values_[j];
    if (!v.present) continue;
    s.params.emplace_back(std::string(decls_[j].name),
                          decls_[j].type == ParamType::kDouble ? FormatDouble(v.d) : std::to_string(v.i));
  }
  return s;
}

std::vector<std::string> SupportedStages() {
  std::vector<std::string> names;
  for (const StageDecl* d : kStages) names.emplace_back(d->name);
  return names;
}

namespace {

void AppendEntry(std::string* out, std::string_view name, std::string_view kind, std::string_view summary,
                 std::span<const ParamDecl> params) {
  std::string head = "  " + std::string(name);
  head.resize(std::max<size_t>(head.size() + 1, 12), ' ');
  head += std::string(kind);
  head.resize(std::max<size_t>(head.size() + 1, 28), ' ');
  *out += head + std::string(summary) + "\n";
  for (const ParamDecl& p : params) {
    std::string line = "      " + std::string(p.name) + (p.has_default ? "=" + DefaultText(p) : "");
    line.resize(std::max<size_t>(line.size() + 1, 24), ' ');
    line += (p.type == ParamType::kDouble ? "number in " : "integer in ") + RangeText(p);
    if (!p.has_default) line += ", optional";
    if (!p.excludes.empty()) line += ", not with " + std::string(p.excludes);
    *out += line + ": " + std::string(p.meaning) + "\n";
  }
}

}  // namespace

std::string StagesHelp() {
  std::string order;
  for (int s = 0; s < kNumSlots; ++s) order += std::string(order.empty() ? "" : " | ") + SlotName(static_cast<Slot>(s));
  std::string out =
      "Codec spec: stages joined by '|', each 'name' or 'name:key=value,key=value', at most one per slot,\n"
      "in slot order (" + order + "); 'none' (or empty) is dense fp32.\n"
      "Stages (parameter=default):\n";
  for (const StageDecl* d : kStages) AppendEntry(&out, d->name, SlotName(d->slot), d->summary, d->params);
  out += "Presets:\n";
  for (const PresetDecl* p : kPresets) AppendEntry(&out, p->name, "preset", p->summary, p->params());
  return out;
}

}  // namespace shoal::codec
