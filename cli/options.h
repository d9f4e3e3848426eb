// Command-line parsing shared by the CLIs (Boost.Program_options, which only the cli/ library
// and the mains link; nothing in sdk/ includes it).
#pragma once

#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "cli/cli.h"
#include "shoal/config.h"

namespace shoal::cli {

// Boost parses "-1" into an unsigned option by wrapping it (--rounds -1 would mean 2^64 - 1):
// the first negative value given to an option of unsigned type, as "--NAME must not be negative
// (got V)", or nothing.
inline std::optional<std::string> NegativeUnsigned(const boost::program_options::parsed_options& parsed,
                                                   const boost::program_options::options_description& opts) {
  namespace po = boost::program_options;
  for (const po::option& o : parsed.options) {
    const po::option_description* d = opts.find_nothrow(o.string_key, false);
    if (!d) continue;
    const po::value_semantic* v = d->semantic().get();
    const bool is_unsigned = dynamic_cast<const po::typed_value<unsigned long>*>(v) ||
                             dynamic_cast<const po::typed_value<unsigned long long>*>(v) ||
                             dynamic_cast<const po::typed_value<unsigned int>*>(v) ||
                             dynamic_cast<const po::typed_value<unsigned short>*>(v);
    if (!is_unsigned) continue;
    for (const std::string& value : o.value) {
      const size_t first = value.find_first_not_of(" \t");
      if (first != std::string::npos && value[first] == '-')
        return "--" + o.string_key + " must not be negative (got " + value + ")";
    }
  }
  return std::nullopt;
}

// Parses argv, then `--config FILE` if given (flags on the command line win), then handles
// --help and --version (which `opts` must declare along with --config). Returns the exit code
// when the program should stop now (help shown: 0; bad usage: 2, with one error line).
inline std::optional<int> ParseOptions(int argc, char** argv, const boost::program_options::options_description& opts,
                                       boost::program_options::variables_map& vm, const std::string& program) {
  namespace po = boost::program_options;
  try {
    const po::parsed_options command_line = po::parse_command_line(argc, argv, opts);
    if (auto why = NegativeUnsigned(command_line, opts)) return Fail(program, *why, 2);
    po::store(command_line, vm);
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream f(path);
      if (!f) return Fail(program, "cannot read --config " + path, 2);
      const po::parsed_options file = po::parse_config_file(f, opts);
      if (auto why = NegativeUnsigned(file, opts)) return Fail(program, *why + " in --config " + path, 2);
      po::store(file, vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    return Fail(program, std::string(e.what()) + " (see --help)", 2);
  }
  if (vm.count("help")) {
    std::cout << opts << '\n';
    return 0;
  }
  if (vm.count("version")) {
    std::cout << program << ' ' << SHOAL_VERSION_STRING << '\n';
    return 0;
  }
  return std::nullopt;
}

}  // namespace shoal::cli
