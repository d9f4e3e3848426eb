// The codec stage registry: every stage declared once (unique name and wire id, slot matching
// its factory), every declared parameter in the help text with its range, out-of-range values
// refused with the declared range quoted, and every stage's defaults a canonical fixed point.
#include "codec/registry.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "codec/stages.h"

namespace shoal::codec {
namespace {

std::vector<TensorSpec> Layout() { return {{"w", {8, 12}}, {"b", {12}}}; }

std::string Num(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, end);
}

// Values just outside p's declared range (none beyond an int64 bound but the text past it).
std::vector<std::string> OutOfRange(const ParamDecl& p) {
  std::vector<std::string> out;
  if (p.type == ParamType::kDouble) {
    const double inf = std::numeric_limits<double>::infinity();
    out.push_back(Num(p.lo_open ? p.double_lo : std::nextafter(p.double_lo, -inf)));
    out.push_back(Num(p.hi_open ? p.double_hi : std::nextafter(p.double_hi, inf)));
    return out;
  }
  out.push_back(p.int_lo == INT64_MIN ? "-9223372036854775809" : std::to_string(p.int_lo - 1));
  out.push_back(p.int_hi == INT64_MAX ? "9223372036854775808" : std::to_string(p.int_hi + 1));
  return out;
}

// A spec of `name` with every parameter that has a default set to it, in declaration order.
std::string DefaultsSpec(std::string_view name, std::span<const ParamDecl> params) {
  std::string s(name);
  char sep = ':';
  for (const ParamDecl& p : params) {
    if (!p.has_default) continue;
    s += sep + std::string(p.name) + "=" + DefaultText(p);
    sep = ',';
  }
  return s;
}

TEST(RegistryTest, EveryStageIsDeclaredOnceWithAUniqueNameAndWireId) {
  const StageId all[] = {StageId::kErrorFeedback, StageId::kDct,  StageId::kPowerSgd, StageId::kTopK,
                         StageId::kRandK,         StageId::kFp16, StageId::kBf16,     StageId::kInt8,
                         StageId::kQsgd,          StageId::kSign, StageId::kZstd};
  std::set<std::string_view> names;
  std::set<StageId> ids;
  int last_slot = 0;
  for (const StageDecl* d : Stages()) {
    SCOPED_TRACE(std::string(d->name));
    EXPECT_FALSE(d->name.empty());
    EXPECT_FALSE(d->summary.empty());
    EXPECT_TRUE(names.insert(d->name).second) << "name declared twice";
    EXPECT_TRUE(ids.insert(d->id).second) << "wire id declared twice";
    EXPECT_EQ(FindStage(d->name), d);
    // The slot is the factory's kind (StageFactory's alternatives are in Slot order).
    EXPECT_EQ(static_cast<size_t>(d->slot), d->factory.index());
    EXPECT_GE(static_cast<int>(d->slot), last_slot) << "the table is ordered by slot";
    last_slot = static_cast<int>(d->slot);
  }
  // Exactly the wire ids of the StageId enum, each declared by one stage.
  EXPECT_EQ(ids, std::set<StageId>(std::begin(all), std::end(all)));
  EXPECT_EQ(FindStage("demo"), nullptr);
  for (const PresetDecl* p : Presets()) EXPECT_TRUE(names.insert(p->name).second) << p->name;

  std::vector<std::string> expected;
  for (const StageDecl* d : Stages()) expected.emplace_back(d->name);
  EXPECT_EQ(SupportedStages(), expected);
}

TEST(RegistryTest, ParameterDeclarationsAreConsistent) {
  auto check = [](std::string_view stage, std::span<const ParamDecl> params) {
    std::set<std::string_view> seen;
    for (const ParamDecl& p : params) {
      SCOPED_TRACE(std::string(stage) + ":" + std::string(p.name));
      EXPECT_TRUE(seen.insert(p.name).second) << "parameter declared twice";
      EXPECT_FALSE(p.meaning.empty());
      if (p.type == ParamType::kDouble) {
        EXPECT_LT(p.double_lo, p.double_hi);
        if (p.has_default) {
          EXPECT_TRUE(p.lo_open ? p.double_default > p.double_lo : p.double_default >= p.double_lo);
          EXPECT_TRUE(p.hi_open ? p.double_default < p.double_hi : p.double_default <= p.double_hi);
        }
      } else {
        EXPECT_LE(p.int_lo, p.int_hi);
        if (p.has_default) {
          EXPECT_GE(p.int_default, p.int_lo);
          EXPECT_LE(p.int_default, p.int_hi);
        }
      }
    }
    for (const ParamDecl& p : params) {
      if (!p.excludes.empty()) {
        EXPECT_TRUE(seen.count(p.excludes)) << p.name << " excludes an undeclared parameter";
      }
    }
  };
  for (const StageDecl* d : Stages()) check(d->name, d->params);
  for (const PresetDecl* p : Presets()) check(p->name, p->params());
}

TEST(RegistryTest, HelpListsEveryStageAndParameterWithItsRange) {
  const std::string help = StagesHelp();
  auto check = [&help](std::string_view name, std::span<const ParamDecl> params) {
    const size_t entry = help.find("\n  " + std::string(name) + " ");
    ASSERT_NE(entry, std::string::npos) << name << "\n" << help;
    for (const ParamDecl& p : params) {
      // Below the stage's line: "name=default" (or the bare name when optional), then its
      // range and meaning, on one line.
      const std::string head = "      " + std::string(p.name) + (p.has_default ? "=" + DefaultText(p) : "");
      const size_t at = help.find(head, entry);
      ASSERT_NE(at, std::string::npos) << name << ": " << head << "\n" << help;
      const std::string line = help.substr(at, help.find('\n', at) - at);
      EXPECT_NE(line.find(RangeText(p)), std::string::npos) << line;
      EXPECT_NE(line.find(p.meaning), std::string::npos) << line;
    }
  };
  for (const StageDecl* d : Stages()) {
    check(d->name, d->params);
    EXPECT_NE(help.find(SlotName(d->slot)), std::string::npos);
  }
  for (const PresetDecl* p : Presets()) check(p->name, p->params());
}

TEST(RegistryTest, OutOfRangeValuesAreRefusedQuotingTheDeclaredRange) {
  int checked = 0;
  auto check = [&checked](std::string_view name, std::span<const ParamDecl> params) {
    for (const ParamDecl& p : params) {
      for (const std::string& bad : OutOfRange(p)) {
        const std::string spec = std::string(name) + ":" + std::string(p.name) + "=" + bad;
        auto r = ParseSpec(spec);
        ASSERT_FALSE(r.ok()) << spec;
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
        const std::string msg = r.status().message();
        EXPECT_NE(msg.find(std::string(name) + ": bad value '" + bad + "' for '" + std::string(p.name) + "'"),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find(RangeText(p)), std::string::npos) << msg;
        ++checked;
      }
    }
  };
  for (const StageDecl* d : Stages()) check(d->name, d->params);
  for (const PresetDecl* p : Presets()) check(p->name, p->params());
  EXPECT_GE(checked, 20);

  // The stage factories check against the same declaration.
  auto r = MakeInt8({"int8", {{"chunk", "0"}}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(RangeText(*FindParam(kInt8Stage, "chunk"))), std::string::npos);
}

TEST(RegistryTest, RangeText) {
  EXPECT_EQ(RangeText(*FindParam(kDctStage, "chunk")), "[1, 1024]");
  EXPECT_EQ(RangeText(*FindParam(kTopKStage, "ratio")), "(0, 1]");
  EXPECT_EQ(RangeText(*FindParam(kTopKStage, "approx")), "[0, 1]");
}

TEST(RegistryTest, EachStagesDefaultsRoundTripToItsCanonicalString) {
  for (const StageDecl* d : Stages()) {
    const std::string spec = DefaultsSpec(d->name, d->params);
    SCOPED_TRACE(spec);
    auto parsed = ParseSpec(spec);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    ASSERT_EQ(parsed->size(), 1u);
    EXPECT_EQ((*parsed)[0].ToString(), spec);
    // The bare name means the same: defaults filled in.
    auto bare = ParseSpec(std::string(d->name));
    ASSERT_TRUE(bare.ok());
    EXPECT_EQ((*bare)[0].ToString(), spec);
    // And the pipeline builds from it with the same canonical spec.
    auto codec = Codec::Create(spec, Layout());
    ASSERT_TRUE(codec.ok()) << codec.status().ToString();
    EXPECT_EQ((*codec)->spec(), spec);
    // Optional parameters appear once given (and push out what they exclude).
    for (const ParamDecl& p : d->params) {
      if (p.has_default) continue;
      const std::string with = std::string(d->name) + ":" + std::string(p.name) + "=" + std::to_string(p.int_lo);
      auto w = ParseSpec(with);
      ASSERT_TRUE(w.ok()) << with << ": " << w.status().ToString();
      EXPECT_NE((*w)[0].Find(p.name), nullptr);
      auto again = ParseSpec((*w)[0].ToString());
      ASSERT_TRUE(again.ok());
      EXPECT_EQ((*again)[0].ToString(), (*w)[0].ToString());
    }
  }
  for (const PresetDecl* p : Presets()) {
    const std::string spec = DefaultsSpec(p->name, p->params());
    auto expanded = ParseSpec(spec);
    auto bare = ParseSpec(std::string(p->name));
    ASSERT_TRUE(expanded.ok()) << spec << ": " << expanded.status().ToString();
    ASSERT_TRUE(bare.ok());
    std::string a, b;
    for (const auto& st : *expanded) a += (a.empty() ? "" : "|") + st.ToString();
    for (const auto& st : *bare) b += (b.empty() ? "" : "|") + st.ToString();
    EXPECT_EQ(a, b);
    auto again = ParseSpec(a);
    ASSERT_TRUE(again.ok());
    std::string c;
    for (const auto& st : *again) c += (c.empty() ? "" : "|") + st.ToString();
    EXPECT_EQ(c, a);
  }
}

}  // namespace
}  // namespace shoal::codec
