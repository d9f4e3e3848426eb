// shoal-keygen: creates a key pair for CurveZMQ transport security and Ed25519 signatures.
#include <boost/program_options.hpp>

#include <iostream>
#include <string>

#include "cli/cli.h"
#include "crypto/keys.h"
#include "shoal/config.h"

namespace po = boost::program_options;

namespace {

constexpr const char* kProgram = "shoal-keygen";

}  // namespace

int main(int argc, char** argv) {
  std::string prefix;
  bool force = false;
  po::options_description opts(
      "Usage: shoal-keygen PREFIX [--force]\n\n"
      "Creates a key pair and writes two files:\n"
      "  PREFIX.key  the secret keys (X25519 for CurveZMQ, Ed25519 for signatures), mode 0600;\n"
      "              keep it private: give it to this machine's --secret-key only\n"
      "  PREFIX.pub  the public key (one line, 40 Z85 characters): add it to the aggregator's\n"
      "              --allow-keys, or give it to clients as --server-key\n"
      "The public key is also printed on stdout. Existing files are never overwritten unless\n"
      "--force is given.\n\nOptions");
  opts.add_options()
      ("help,h", "show this help and exit")
      ("version", "print the version and exit")
      ("force", po::bool_switch(&force), "overwrite PREFIX.key and PREFIX.pub if they exist");
  po::options_description all;
  all.add(opts).add_options()("prefix", po::value(&prefix));
  po::positional_options_description positional;
  positional.add("prefix", 1);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return shoal::cli::Fail(kProgram, std::string(e.what()) + " (see --help)", 2);
  }
  if (vm.count("help")) {
    std::cout << opts << '\n';
    return 0;
  }
  if (vm.count("version")) {
    std::cout << kProgram << ' ' << SHOAL_VERSION_STRING << '\n';
    return 0;
  }
  if (prefix.empty()) return shoal::cli::Fail(kProgram, "missing PREFIX (usage: shoal-keygen PREFIX [--force])", 2);

  auto keys = shoal::crypto::GenerateKeyPair();
  if (!keys.ok()) return shoal::cli::Fail(kProgram, keys.status().message());
  if (auto st = shoal::crypto::WriteKeyFiles(prefix, *keys, force); !st.ok())
    return shoal::cli::Fail(kProgram, st.message());
  std::cout << shoal::crypto::Z85Key(keys->curve_public) << '\n';
  std::cerr << kProgram << ": wrote " << prefix << ".key (secret, mode 0600) and " << prefix << ".pub\n";
  return 0;
}
