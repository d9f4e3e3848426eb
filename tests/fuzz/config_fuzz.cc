// A --config file for shoal-aggregator (the same options shoal-sim reads): Boost's parser with
// the aggregator's option declarations, then the specs the values name: the strategy
// (MakeStrategy's range checks) and both codec specs (ParseSpec, whose canonical form must
// parse to itself). A bad file must fail with an exception Boost documents or a Status.
#include <boost/program_options.hpp>
#include <sstream>
#include <string>

#include "aggregate/strategy.h"
#include "codec/codec.h"
#include "fuzz.h"
#include "cli/service_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace po = boost::program_options;
  shoal::ServerOptions o;
  shoal::aggregator::ServiceFlags flags;
  po::options_description all;
  all.add(shoal::aggregator::RoundOptions(o, flags))
      .add(shoal::aggregator::TaskOptions(o, flags))
      .add(shoal::aggregator::PrivacyOptions(o, flags));
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    po::variables_map vm;
    po::store(po::parse_config_file(in, all), vm);
    po::notify(vm);
  } catch (const po::error&) {
    return 0;
  }
  (void)shoal::aggregator::MakeStrategy(o.strategy);
  for (const std::string& spec : {o.codec, o.codec_down}) {
    auto stages = shoal::codec::ParseSpec(spec);
    if (!stages.ok()) continue;
    std::string canonical;
    for (const auto& s : *stages) canonical += (canonical.empty() ? "" : "|") + s.ToString();
    auto again = shoal::codec::ParseSpec(canonical);
    FUZZ_CHECK(again.ok());
    std::string twice;
    for (const auto& s : *again) twice += (twice.empty() ? "" : "|") + s.ToString();
    FUZZ_CHECK(twice == canonical);
  }
  return 0;
}
