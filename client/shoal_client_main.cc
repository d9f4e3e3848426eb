// shoal-client: joins an aggregator and trains Shoal's built-in model on a dataset partition.
// The flag table and the progress report are in cli/client_flags.h.
#include <unistd.h>

#include <chrono>
#include <thread>

#include "cli/cli.h"
#include "cli/client_flags.h"
#include "cli/options.h"
#include "shoal/client.h"

namespace po = boost::program_options;

namespace {
constexpr const char* kProgram = "shoal-client";
}  // namespace

int main(int argc, char** argv) {
  shoal::ClientOptions co;
  shoal::BuiltinTrainerOptions to;
  shoal::cli::ClientFlags flags;
  std::string config_file, log_level, log_format = "text";
  po::options_description opts(
      "Usage: shoal-client [options]\n\n"
      "Joins a shoal-aggregator and trains Shoal's built-in model on this machine's part of a\n"
      "dataset. The aggregator sends the task (model, optimizer, local epochs); the client only\n"
      "needs the connection and its data.\n"
      "Example:\n  shoal-client --connect tcp://127.0.0.1:7070 --dataset digits --partition 2/4\n\nOptions");
  opts.add_options()
      ("help,h", "show this help and exit")
      ("version", "print the version and exit")
      ("config", po::value(&config_file), "read options from FILE (key = value lines)")
      ("log-level", po::value(&log_level)->default_value("info"), "trace, debug, info, warn, error or off")
      ("log-format", po::value(&log_format)->default_value(log_format), "text, or json (one object per line)");
  opts.add(shoal::cli::ClientOptionsTable(co, to, flags));
  po::variables_map vm;
  if (auto exit_code = shoal::cli::ParseOptions(argc, argv, opts, vm, kProgram)) return *exit_code;
  if (auto st = shoal::cli::InitLogging(log_level, "client", log_format); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  if (auto st = shoal::cli::ApplyClientFlags(vm, flags, co, to); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);

  // The flags first: a bad one is named before any data is loaded or device probed.
  if (auto st = shoal::ValidateClientOptions(co); !st.ok()) return shoal::cli::Fail(kProgram, st);
  auto trainer = shoal::MakeBuiltinTrainer(to);
  if (!trainer.ok()) return shoal::cli::Fail(kProgram, trainer.status());
  shoal::cli::ProgressReporter reporter(!flags.no_progress && isatty(STDERR_FILENO));
  co.on_event = [&reporter](const shoal::ClientEvent& e) { reporter(e); };

  shoal::Client client(co, std::move(*trainer));
  auto& stop = shoal::cli::InstallStopSignals();
  std::thread watcher([&] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    client.Cancel();
  });
  shoal::Status st = client.Run();
  stop.store(true);  // release the watcher thread
  watcher.join();
  if (st.ok() || st.code() == shoal::StatusCode::kCancelled) {
    auto s = client.stats();
    spdlog::info("trained {} rounds; sent {}, received {}", s.rounds_trained, shoal::cli::HumanBytes(s.bytes_sent),
                 shoal::cli::HumanBytes(s.bytes_received));
    return 0;
  }
  return shoal::cli::Fail(kProgram, st);
}
