#include "core/cli.h"

#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdio>

namespace shoal::cli {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};

extern "C" void OnStopSignal(int) { g_stop.store(true); }
extern "C" void OnReloadSignal(int) { g_reload.store(true); }

}  // namespace

Status InitLogging(const std::string& level, const std::string& program) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    return Status::InvalidArgument("unknown --log-level '" + level + "' (trace, debug, info, warn, error, off)");
  auto logger = spdlog::stderr_color_mt(program);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  spdlog::set_level(lvl);
  return Status::Ok();
}

std::atomic<bool>& InstallStopSignals() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return g_stop;
}

std::atomic<bool>& InstallReloadSignal() {
  struct sigaction sa = {};
  sa.sa_handler = OnReloadSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &sa, nullptr);
  return g_reload;
}

StatusOr<uint64_t> ParseByteSize(const std::string& text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])))
    return Status::InvalidArgument("bad size '" + text + "' (expected e.g. 1048576, 64K, 16M, 1G)");
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos);
  } catch (const std::exception&) {
    return Status::InvalidArgument("bad size '" + text + "'");
  }
  std::string suffix = text.substr(pos);
  uint64_t mult = 1;
  if (suffix == "K" || suffix == "KiB") mult = 1ull << 10;
  else if (suffix == "M" || suffix == "MiB") mult = 1ull << 20;
  else if (suffix == "G" || suffix == "GiB") mult = 1ull << 30;
  else if (!suffix.empty()) return Status::InvalidArgument("bad size suffix in '" + text + "' (use K, M or G)");
  if (v > (~0ull) / mult) return Status::InvalidArgument("size '" + text + "' is too large");
  return static_cast<uint64_t>(v * mult);
}

int Fail(const std::string& program, const std::string& message, int exit_code) {
  std::fprintf(stderr, "%s: error: %s\n", program.c_str(), message.c_str());
  return exit_code;
}

}  // namespace shoal::cli
