// Helpers for integration tests: real processes from build/bin on 127.0.0.1.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace shoal::testing {

std::string BinDir();
// A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's ephemeral range (so
// no outgoing connection takes it before the test binds it), never the same twice per process.
int FreePort();
std::string Endpoint(int port);
// 127.0.0.1:port as a socket address.
sockaddr_in LoopbackAddress(int port);
// A fresh TCP connection to 127.0.0.1:port: its descriptor, or -1 when it cannot be made.
int ConnectLoopback(int port);
// A fresh directory under the test temp dir. All of them are removed when the test binary
// ends with every test passed, and kept (with the processes' logs) when one failed.
std::string TempDir(const std::string& name);

// A child process with stdout and stderr sent to files (<log_prefix>.out / .err).
class Process {
 public:
  Process(const std::string& program, const std::vector<std::string>& args, const std::string& log_prefix,
          const std::map<std::string, std::string>& env = {});
  ~Process();  // kills the process if still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits up to `timeout`; returns the exit code, 128+signal if killed, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  bool Running();
  std::string Stdout() const;
  std::string Stderr() const;

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  bool reaped_ = false;
  std::string out_, err_;
};

// Polls `pred` every 50 ms until it holds or `timeout` passes.
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    ::usleep(50 * 1000);
  }
  return pred();
}

std::string ReadFile(const std::string& path);
// One JSON object per line; unparsable lines fail the calling test. A last line without its
// newline (being written, or cut by a killed writer) is skipped.
std::vector<nlohmann::json> ReadJsonLines(const std::string& path);

// Common flags for a quick aggregator on digits.
std::vector<std::string> AggregatorArgs(int port, int rounds, int min_clients, const std::string& metrics);
std::vector<std::string> ClientArgs(int port, int index, int count);
// The environment every test process gets: one BLAS thread (2 cores, many processes).
const std::map<std::string, std::string>& OneThreadEnv();
// Starts `count` shoal-client processes for parts 0..count-1 of `count` (iid), logs under `dir`.
std::vector<std::unique_ptr<Process>> StartClients(int port, int count, const std::string& dir);
// Every process exits 0 within 30 s (the failure shows its stderr).
void ExpectAllExitZero(std::vector<std::unique_ptr<Process>>& processes);

// Sets `--flag value` in an argument list, replacing an earlier value of the same flag.
void SetFlag(std::vector<std::string>& args, const std::string& flag, const std::string& value);
// `args` followed by `more`.
std::vector<std::string> Concat(std::vector<std::string> args, const std::vector<std::string>& more);

// Key pairs, written with the library exactly as shoal-keygen writes them: DIR/NAME.key and
// DIR/NAME.pub for each name.
void MakeKeys(const std::string& dir, const std::vector<std::string>& names);
// The aggregator's flags for CURVE with key DIR/agg.key and allow-list `allow`.
std::vector<std::string> SecureAggregatorFlags(const std::string& keys_dir, const std::string& allow);
// A client's flags for CURVE with key DIR/NAME.key, pinning DIR/agg.pub.
std::vector<std::string> SecureClientFlags(const std::string& keys_dir, const std::string& name);

// A memory figure of a running process from /proc/PID/status, in KiB ("VmHWM": peak resident,
// "VmRSS": resident now); 0 if it cannot be read.
uint64_t ProcMemoryKiB(pid_t pid, const std::string& field);

}  // namespace shoal::testing
