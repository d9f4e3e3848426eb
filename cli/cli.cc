#include "cli/cli.h"

#include <signal.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <memory>

namespace shoal::cli {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
bool g_json_logs = false;  // InitLogging's format is json: Fail logs its error as one more object

extern "C" void OnStopSignal(int) { g_stop.store(true); }
extern "C" void OnReloadSignal(int) { g_reload.store(true); }

// %* in a pattern: the message as the inside of a JSON string, escaped by nlohmann::json (bytes
// that are not UTF-8 become U+FFFD, so every line stays valid JSON).
class JsonMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string quoted = nlohmann::json(std::string(msg.payload.data(), msg.payload.size()))
                                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(quoted.data() + 1, quoted.data() + quoted.size() - 1);  // without the quotes
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessage>(); }
};

}  // namespace

Status InitLogging(const std::string& level, const std::string& program, const std::string& format) {
  if (format != "text" && format != "json")
    return Status::InvalidArgument("unknown --log-format '" + format + "' (text or json)");
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    return Status::InvalidArgument("unknown --log-level '" + level + "' (trace, debug, info, warn, error, off)");
  auto logger = spdlog::stderr_color_mt(program);
  spdlog::set_default_logger(logger);
  g_json_logs = format == "json";
  if (g_json_logs) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JsonMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%f%z","level":"%l","program":"%n","message":"%*"})");
    spdlog::set_formatter(std::move(formatter));
  } else {
    spdlog::set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  }
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

int Fail(const std::string& program, const Status& status) {
  return Fail(program, status.message(), status.code() == StatusCode::kInvalidArgument ? 2 : 1);
}

int Fail(const std::string& program, const std::string& message, int exit_code) {
  if (g_json_logs) {
    spdlog::error("{}: error: {}", program, message);  // one more JSON line
    spdlog::default_logger()->flush();
  } else {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), message.c_str());
  }
  return exit_code;
}

}  // namespace shoal::cli
