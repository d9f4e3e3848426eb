#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include "crypto/keys.h"

namespace shoal::testing {

std::string BinDir() { return SHOAL_BIN_DIR; }

sockaddr_in LoopbackAddress(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in a = LoopbackAddress(port);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

namespace {

// Whether 127.0.0.1:port can be bound now (with SO_REUSEADDR, as ZeroMQ's listeners set it).
bool CanBind(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const sockaddr_in a = LoopbackAddress(port);
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// The lowest port of the kernel's ephemeral range (net.ipv4.ip_local_port_range).
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  in >> low;
  return low;
}

}  // namespace

int FreePort() {
  // Below the ephemeral range: a port bind(0) hands out is one any process's next outgoing
  // connection (the tests make thousands) may take before the test's process binds it; below
  // the range only another listener can. Drawn at random (other test binaries run beside
  // this one), never the same twice in one process.
  static std::mutex mu;
  static std::set<int> given;
  static std::mt19937 rng(static_cast<uint32_t>(::getpid()) ^
                          static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::lock_guard<std::mutex> lock(mu);
  const int low = 20000, high = EphemeralLow() - 1;
  for (int tries = 0; high > low && tries < 1000; ++tries) {
    const int port = std::uniform_int_distribution<int>(low, high)(rng);
    if (given.count(port) || !CanBind(port)) continue;
    given.insert(port);
    return port;
  }
  // No room below the range: the kernel's choice.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = LoopbackAddress(0);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

std::string Endpoint(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

namespace {

std::vector<std::string>& CreatedDirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

class RemoveDirsOnSuccess : public ::testing::Environment {
 public:
  void TearDown() override {
    if (::testing::UnitTest::GetInstance()->Failed()) return;
    std::error_code ec;
    for (const auto& d : CreatedDirs()) std::filesystem::remove_all(d, ec);
  }
};

[[maybe_unused]] ::testing::Environment* const kRemoveDirs =
    ::testing::AddGlobalTestEnvironment(new RemoveDirsOnSuccess);

}  // namespace

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path p = std::filesystem::path(base ? base : "/tmp") /
                            ("shoal-it-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  CreatedDirs().push_back(p.string());
  return p.string();
}

Process::Process(const std::string& program, const std::vector<std::string>& args, const std::string& log_prefix,
                 const std::map<std::string, std::string>& env)
    : out_(log_prefix + ".out"), err_(log_prefix + ".err") {
  pid_ = ::fork();
  if (pid_ == 0) {
    int out = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    std::string path = program.find('/') == std::string::npos ? BinDir() + "/" + program : program;
    argv.push_back(const_cast<char*>(path.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(path.c_str(), argv.data());
    ::_exit(127);
  }
}

Process::~Process() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

void Process::Signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

bool Process::Running() {
  if (reaped_) return false;
  pid_t r = ::waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

int Process::Wait(std::chrono::milliseconds timeout) {
  WaitFor([&] { return !Running(); }, timeout);
  if (!reaped_) return -1;
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Process::Stdout() const { return ReadFile(out_); }
std::string Process::Stderr() const { return ReadFile(err_); }

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    // A last line without its newline is still being written (or its writer was killed
    // mid-line): not a metrics line yet.
    if (f.eof()) break;
    auto j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "unparsable metrics line: " << line;
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

std::vector<std::string> AggregatorArgs(int port, int rounds, int min_clients, const std::string& metrics) {
  return {"--listen", Endpoint(port), "--rounds", std::to_string(rounds), "--min-clients", std::to_string(min_clients),
          "--model", "mlp:32", "--dataset", "digits", "--seed", "7", "--lr", "0.1", "--momentum", "0.9",
          "--metrics-out", metrics, "--round-timeout", "20", "--heartbeat-interval", "0.2",
          "--heartbeat-timeout", "2", "--log-level", "info"};
}

std::vector<std::string> ClientArgs(int port, int index, int count) {
  return {"--connect", Endpoint(port), "--dataset", "digits", "--partition",
          std::to_string(index) + "/" + std::to_string(count), "--partition-scheme", "iid", "--no-progress",
          "--connect-timeout", "20", "--reconnect-timeout", "30", "--device", "cpu"};
}

const std::map<std::string, std::string>& OneThreadEnv() {
  static const std::map<std::string, std::string> env = {{"OPENBLAS_NUM_THREADS", "1"}};
  return env;
}

std::vector<std::unique_ptr<Process>> StartClients(int port, int count, const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::unique_ptr<Process>> out;
  for (int i = 0; i < count; ++i)
    out.push_back(std::make_unique<Process>("shoal-client", ClientArgs(port, i, count),
                                            dir + "/client" + std::to_string(i), OneThreadEnv()));
  return out;
}

void ExpectAllExitZero(std::vector<std::unique_ptr<Process>>& processes) {
  for (auto& p : processes) EXPECT_EQ(p->Wait(std::chrono::seconds(30)), 0) << p->Stderr();
}

void SetFlag(std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag) {
      args[i + 1] = value;
      return;
    }
  args.push_back(flag);
  args.push_back(value);
}

std::vector<std::string> Concat(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

void MakeKeys(const std::string& dir, const std::vector<std::string>& names) {
  std::filesystem::create_directories(dir);
  for (const auto& name : names) {
    auto keys = crypto::GenerateKeyPair();
    ASSERT_TRUE(keys.ok()) << keys.status().ToString();
    auto st = crypto::WriteKeyFiles(dir + "/" + name, *keys, /*force=*/false);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
}

std::vector<std::string> SecureAggregatorFlags(const std::string& keys_dir, const std::string& allow) {
  return {"--secret-key", keys_dir + "/agg.key", "--allow-keys", allow};
}

std::vector<std::string> SecureClientFlags(const std::string& keys_dir, const std::string& name) {
  return {"--secret-key", keys_dir + "/" + name + ".key", "--server-key", keys_dir + "/agg.pub", "--name", name};
}

uint64_t ProcMemoryKiB(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  return 0;
}

}  // namespace shoal::testing
