// Command-line parsing shared by the CLIs (Boost.Program_options; header-only so libshoal
// itself does not depend on Boost).
#pragma once

#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "core/cli.h"
#include "shoal/config.h"

namespace shoal::cli {

// Parses argv, then `--config FILE` if given (flags on the command line win), then handles
// --help and --version (which `opts` must declare along with --config). Returns the exit code
// when the program should stop now (help shown: 0; bad usage: 2, with one error line).
inline std::optional<int> ParseOptions(int argc, char** argv, const boost::program_options::options_description& opts,
                                       boost::program_options::variables_map& vm, const std::string& program) {
  namespace po = boost::program_options;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream f(path);
      if (!f) return Fail(program, "cannot read --config " + path, 2);
      po::store(po::parse_config_file(f, opts), vm);
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
