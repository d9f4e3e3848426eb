// The codec stage registry (DESIGN.md §3 "Codec"). Each stage file declares its stage once, in a
// StageDecl: name, wire id, slot, parameters (type, default, range, meaning) and factory. The
// spec parser (spec.cc), parameter validation and canonical form (here), the pipeline (codec.cc),
// the Make* factories the tests call (stages.h) and the help text (StagesHelp) all read those
// declarations, so no name, range or default is written twice.
//
// The table of stages is explicit (registry.cc lists each declaration defined in its own file):
// libshoal is also a static library, and self-registering objects in translation units nothing
// references would be dropped by the linker. The declarations are constant-initialized
// (constinit), so reading the table never depends on static-initialization order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "codec/codec.h"

namespace shoal::codec {

// Where a stage sits in the pipeline; stages of a spec appear in this order, one per slot.
// kErrorFeedback is encoder-side state that wraps the rest and leaves the payload format alone;
// every other slot is on the wire (its StageId is listed in the payload header).
enum class Slot : uint8_t { kErrorFeedback = 0, kTransform = 1, kSelect = 2, kQuantize = 3, kPack = 4 };
constexpr int kNumSlots = 5;
const char* SlotName(Slot slot);

// One parameter of a stage. Build with IntParam / OptionalIntParam / BoolParam / RatioParam below.
enum class ParamType : uint8_t { kInt, kBool, kDouble };
struct ParamDecl {
  std::string_view name;
  ParamType type = ParamType::kInt;
  bool has_default = true;  // false: optional, absent unless given
  int64_t int_default = 0, int_lo = 0, int_hi = 0;  // kInt, kBool: closed range [lo, hi]
  double double_default = 0, double_lo = 0, double_hi = 0;
  bool lo_open = false, hi_open = false;  // kDouble: (lo or [lo, hi) or hi]
  std::string_view excludes;  // another parameter of the stage: giving both is an error, and
                              // this one's default is not filled in when the other is given
  std::string_view meaning;   // one line, for the help text
};

constexpr ParamDecl IntParam(std::string_view name, int64_t def, int64_t lo, int64_t hi, std::string_view meaning) {
  ParamDecl p;
  p.name = name;
  p.int_default = def;
  p.int_lo = lo;
  p.int_hi = hi;
  p.meaning = meaning;
  return p;
}
// An integer parameter without a default: absent unless given.
constexpr ParamDecl OptionalIntParam(std::string_view name, int64_t lo, int64_t hi, std::string_view meaning) {
  ParamDecl p = IntParam(name, 0, lo, hi, meaning);
  p.has_default = false;
  return p;
}
constexpr ParamDecl BoolParam(std::string_view name, bool def, std::string_view meaning) {
  ParamDecl p = IntParam(name, def ? 1 : 0, 0, 1, meaning);
  p.type = ParamType::kBool;
  return p;
}
// A share in (0, 1]; `excludes` as in ParamDecl.
constexpr ParamDecl RatioParam(std::string_view name, double def, std::string_view meaning,
                               std::string_view excludes = {}) {
  ParamDecl p;
  p.name = name;
  p.type = ParamType::kDouble;
  p.double_default = def;
  p.double_lo = 0;
  p.double_hi = 1;
  p.lo_open = true;
  p.excludes = excludes;
  p.meaning = meaning;
  return p;
}

// The declared range as the help text and every range error quote it: "[1, 1024]", "(0, 1]".
std::string RangeText(const ParamDecl& p);
// The declared default in canonical form ("256", "0.01"); "" without one.
std::string DefaultText(const ParamDecl& p);

// A stage's parameters, checked against its declaration: every value typed and in range,
// defaults filled in.
class StageParams {
 public:
  // InvalidArgument, naming `stage` and the parameter, for an unknown parameter, one given
  // twice, two that exclude each other, or a value that is malformed or outside the declared
  // range (the message quotes RangeText).
  static StatusOr<StageParams> Parse(std::string_view stage, std::span<const ParamDecl> decls, const StageSpec& spec);

  // Whether the parameter has a value (given, or a default). Reading a parameter the stage did
  // not declare is a programming error (aborts).
  bool Has(std::string_view key) const;
  int64_t Int(std::string_view key) const;  // kInt, kBool; 0 when absent
  double Double(std::string_view key) const;  // kDouble; 0 when absent
  // The canonical stage: every parameter with a value, in declaration order, numbers in
  // shortest form.
  StageSpec ToSpec() const;

 private:
  struct Value {
    bool present = false;
    int64_t i = 0;
    double d = 0;
  };
  size_t Index(std::string_view key) const;

  std::string stage_;
  std::span<const ParamDecl> decls_;
  std::vector<Value> values_;
};

// What a stage's factory builds. ErrorFeedback is the pipeline-side wrapper of "ef" (ef.cc);
// Packer compresses the whole body (the pack slot, zstd.cc).
class ErrorFeedback;
class Packer;
template <class T>
using Factory = StatusOr<std::unique_ptr<T>> (*)(const StageParams& params, const std::vector<TensorSpec>& layout);
using StageFactory =
    std::variant<Factory<ErrorFeedback>, Factory<Transform>, Factory<Selector>, Factory<Quantizer>, Factory<Packer>>;

// One stage, declared once in its own file.
struct StageDecl {
  std::string_view name;
  StageId id;  // wire format: never renumber
  Slot slot;   // must match the factory's alternative (checked by the registry test)
  std::string_view summary;  // one line, for the help text
  std::span<const ParamDecl> params;
  StageFactory factory;
};

// Every stage, ordered by slot (the order of the help text, of "unknown stage" errors and of
// SupportedStages()).
std::span<const StageDecl* const> Stages();
const StageDecl* FindStage(std::string_view name);
// The declaration of `stage`'s parameter `key`, or nullptr.
const ParamDecl* FindParam(const StageDecl& stage, std::string_view key);

// A preset: a name that expands into several stages (spec.cc: "demo").
struct PresetDecl {
  std::string_view name;
  std::string_view summary;
  std::span<const ParamDecl> (*params)();
  // The stages it stands for, not yet canonical (the parser canonicalizes each).
  StatusOr<std::vector<StageSpec>> (*expand)(const StageParams& params);
};
std::span<const PresetDecl* const> Presets();

// Builds the stage `spec` names with `decl`'s factory after checking its parameters; an
// Internal error if the stage is not of kind T.
template <class T>
StatusOr<std::unique_ptr<T>> MakeStage(const StageDecl& decl, const StageSpec& spec,
                                      const std::vector<TensorSpec>& layout = {}) {
  SHOAL_ASSIGN_OR_RETURN(StageParams params, StageParams::Parse(decl.name, decl.params, spec));
  const Factory<T>* make = std::get_if<Factory<T>>(&decl.factory);
  if (!make) return Status::Internal("codec: stage '" + std::string(decl.name) + "' is not of the kind asked for");
  return (*make)(params, layout);
}

// The factory of a stage without parameters: a default-constructed Impl.
template <class Kind, class Impl>
StatusOr<std::unique_ptr<Kind>> BuildPlain(const StageParams&, const std::vector<TensorSpec>&) {
  return std::unique_ptr<Kind>(std::make_unique<Impl>());
}

// The help text: the spec grammar, then every stage and preset with its slot, summary and
// parameters (name, default, range, meaning).
std::string StagesHelp();

}  // namespace shoal::codec
