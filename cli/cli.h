// Helpers shared by the command-line programs (the shoal_cli library beside the mains, not
// libshoal): logging setup, signal handling, byte sizes, error exits.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

#include "shoal/status.h"

namespace shoal::cli {

// Logs go to stderr. level: trace|debug|info|warn|error|off. format "text": "[time] [program]
// [level] message"; "json": one JSON object per line, {"time" (ISO 8601, local, with the UTC
// offset), "level", "program", "message"} (for journald, Loki, Elasticsearch ...).
Status InitLogging(const std::string& level, const std::string& program, const std::string& format = "text");

// Installs SIGINT/SIGTERM handlers that set the returned flag (and SIGPIPE ignore).
std::atomic<bool>& InstallStopSignals();
// Installs a SIGHUP handler that sets the returned flag (the reader clears it).
std::atomic<bool>& InstallReloadSignal();

// A flag's seconds as the options' milliseconds (rounded; the caller has checked the range).
inline uint32_t Millis(double seconds) { return static_cast<uint32_t>(std::llround(seconds * 1000.0)); }

// "16777216", "64K", "16M", "1G" (binary multiples) -> bytes.
StatusOr<uint64_t> ParseByteSize(const std::string& text);

// Prints "PROGRAM: error: MESSAGE" to stderr (with --log-format json: as a JSON log line,
// level "error") and returns the exit code to use.
int Fail(const std::string& program, const std::string& message, int exit_code = 1);
// The same for a failed Status: exit code 2 when it is InvalidArgument (bad usage), else 1.
int Fail(const std::string& program, const Status& status);

}  // namespace shoal::cli
