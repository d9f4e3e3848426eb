// The codec spec grammar (DESIGN.md §6): ParseSpec and StageSpec. Which stages and presets
// exist, their slots and their parameters come from the registry (registry.h).
//   spec  := "none" | "" | stage ("|" stage)*        at most one stage per slot, in slot order
//   stage := name | name ":" key "=" value ("," key "=" value)*
// Spaces and tabs around names, keys, values and '|' are ignored.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "codec/registry.h"

namespace shoal::codec {

const std::string* StageSpec::Find(std::string_view key) const {
  for (const auto& [k, v] : params) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string StageSpec::ToString() const {
  std::string s = name;
  for (size_t i = 0; i < params.size(); ++i) s += (i ? "," : ":") + params[i].first + "=" + params[i].second;
  return s;
}

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}

// "ef, dct, ..., zstd, demo, none": every name a spec may use.
std::string ValidNames() {
  std::string s;
  for (const StageDecl* d : Stages()) s += (s.empty() ? "" : ", ") + std::string(d->name);
  for (const PresetDecl* p : Presets()) s += ", " + std::string(p->name);
  return s + ", none";
}

// "ef | dct|powersgd | topk|randk | ...": the stages of each slot, slots in order.
std::string SlotOrder() {
  std::string s;
  for (int slot = 0; slot < kNumSlots; ++slot) {
    std::string names;
    for (const StageDecl* d : Stages()) {
      if (static_cast<int>(d->slot) == slot) names += (names.empty() ? "" : "|") + std::string(d->name);
    }
    if (!names.empty()) s += (s.empty() ? "" : " | ") + names;
  }
  return s;
}

const PresetDecl* FindPreset(std::string_view name) {
  for (const PresetDecl* p : Presets()) {
    if (p->name == name) return p;
  }
  return nullptr;
}

// Splits "name:k=v,k=v" into a StageSpec (syntax only).
StatusOr<StageSpec> ParseStage(std::string_view text) {
  StageSpec st;
  size_t colon = text.find(':');
  st.name = std::string(Trim(text.substr(0, colon)));
  if (st.name.empty()) return Status::InvalidArgument("empty stage name in '" + std::string(text) + "'");
  if (colon == std::string_view::npos) return st;
  for (std::string_view kv : Split(text.substr(colon + 1), ',')) {
    size_t eq = kv.find('=');
    std::string_view key = Trim(kv.substr(0, eq));
    std::string_view value = eq == std::string_view::npos ? std::string_view() : Trim(kv.substr(eq + 1));
    if (eq == std::string_view::npos || key.empty() || value.empty()) {
      return Status::InvalidArgument(st.name + ": malformed parameter '" + std::string(Trim(kv)) + "' (expected key=value)");
    }
    if (st.Find(key)) return Status::InvalidArgument(st.name + ": parameter '" + std::string(key) + "' given twice");
    st.params.emplace_back(std::string(key), std::string(value));
  }
  return st;
}

// One stage or preset of a spec in canonical form: its stages and the slot each fills.
struct Canonical {
  std::vector<StageSpec> stages;
  std::vector<Slot> slots;
};
StatusOr<Canonical> Canonicalize(const StageSpec& st) {
  std::vector<StageSpec> raw = {st};
  if (const PresetDecl* preset = FindPreset(st.name)) {
    SHOAL_ASSIGN_OR_RETURN(StageParams params, StageParams::Parse(preset->name, preset->params(), st));
    SHOAL_ASSIGN_OR_RETURN(raw, preset->expand(params));
  }
  Canonical out;
  for (const StageSpec& r : raw) {
    const StageDecl* decl = FindStage(r.name);
    if (!decl) return Status::InvalidArgument("unknown stage '" + r.name + "' (valid: " + ValidNames() + ")");
    SHOAL_ASSIGN_OR_RETURN(StageParams params, StageParams::Parse(decl->name, decl->params, r));
    out.stages.push_back(params.ToSpec());
    out.slots.push_back(decl->slot);
  }
  return out;
}

}  // namespace

StatusOr<std::vector<std::string>> SpecNames(const std::string& spec) {
  std::string_view whole = Trim(spec);
  std::vector<std::string> names;
  if (whole.empty() || whole == "none") return names;
  for (std::string_view part : Split(whole, '|')) {
    SHOAL_ASSIGN_OR_RETURN(StageSpec st, ParseStage(Trim(part)));
    names.push_back(std::move(st.name));
  }
  return names;
}

Status CheckDemoPresetPairing(const std::string& spec, const std::string& optimizer, const std::string& demo_flags) {
  auto names = SpecNames(spec);
  if (!names.ok() || optimizer == "demo") return Status::Ok();
  auto has = [&](const char* name) { return std::find(names->begin(), names->end(), name) != names->end(); };
  if (!has("demo") || has("ef")) return Status::Ok();
  return Status::InvalidArgument("--codec " + spec +
                                 " is DeMo's encoding of the momentum its client optimizer extracts; without it, "
                                 "top-k drops most of every update for good. Pass " + demo_flags +
                                 ", or keep the dropped part with error feedback: --codec 'ef|" + spec + "'");
}

StatusOr<std::vector<StageSpec>> ParseSpec(const std::string& spec) {
  auto fail = [&spec](const std::string& why) { return Status::InvalidArgument("codec spec '" + spec + "': " + why); };
  std::string_view whole = Trim(spec);
  std::vector<StageSpec> out;
  if (whole.empty() || whole == "none") return out;
  std::vector<std::pair<Slot, std::string>> filled;  // slot and the user-facing name that filled it
  for (std::string_view part : Split(whole, '|')) {
    part = Trim(part);
    if (part.empty()) return fail("empty stage (two '|' in a row or a '|' at an end)");
    auto parsed = ParseStage(part);
    if (!parsed.ok()) return fail(parsed.status().message());
    const StageSpec& st = *parsed;
    if (st.name == "none") return fail("'none' must be the whole spec");
    auto canon = Canonicalize(st);
    if (!canon.ok()) return fail(canon.status().message());
    for (Slot slot : canon->slots) {
      for (const auto& [s, name] : filled) {
        if (s == slot) {
          if (name == st.name) return fail("'" + st.name + "' appears twice");
          return fail("'" + name + "' and '" + st.name + "' both fill the " + SlotName(slot) + " slot");
        }
        if (static_cast<int>(s) > static_cast<int>(slot)) {
          return fail("'" + st.name + "' after '" + name + "' is out of order (order: " + SlotOrder() + ")");
        }
      }
    }
    for (Slot slot : canon->slots) filled.emplace_back(slot, st.name);
    for (auto& s : canon->stages) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace shoal::codec
