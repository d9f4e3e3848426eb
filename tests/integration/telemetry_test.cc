// The Prometheus endpoints of shoal-aggregator and shoal-peer, scraped during real runs with a
// real HTTP client (libcurl), their values checked against the same runs' metrics files.
#include <curl/curl.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <csignal>
#include <ctime>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "harness.h"
#include "shoal/config.h"

namespace shoal::testing {
namespace {

using std::chrono::seconds;
const auto& kOneThread = OneThreadEnv();

struct Scrape {
  long status = 0;
  std::string content_type;
  std::map<std::string, double> samples;  // "name{labels}" as exposed -> value
  double at(const std::string& series) const {
    auto it = samples.find(series);
    EXPECT_NE(it, samples.end()) << "no series " << series;
    return it == samples.end() ? -1 : it->second;
  }
};

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// GET http://127.0.0.1:PORT/metrics, parsed: every sample line "series value".
Scrape ScrapeMetrics(int port) {
  Scrape s;
  std::string body;
  CURL* curl = curl_easy_init();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/metrics";
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &s.status);
    char* type = nullptr;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &type);
    if (type) s.content_type = type;
  }
  curl_easy_cleanup(curl);
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    s.samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return s;
}

// The HTTP status of one request (`method` "GET" or another), -1 when none came back.
long StatusOf(const std::string& url, const std::string& method = "GET") {
  std::string body;
  CURL* curl = curl_easy_init();
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
  long status = -1;
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  return status;
}

// A running federation, scraped mid-run: every counter equals the sum of the metrics file's
// lines up to the round the scrape reports, the gauges equal that round's line.
TEST(Telemetry, AggregatorScrapeMatchesTheMetricsFile) {
  const std::string dir = TempDir("prometheus-aggregator");
  const int port = FreePort(), metrics_port = FreePort();
  auto args = AggregatorArgs(port, 0, 3, dir + "/run.jsonl");  // until stopped
  args = Concat(args, {"--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port), "--codec", "int8"});
  Process agg("shoal-aggregator", args, dir + "/agg", kOneThread);
  auto clients = StartClients(port, 3, dir);
  ASSERT_TRUE(WaitFor([&] { return ReadJsonLines(dir + "/run.jsonl").size() >= 3; }, seconds(60))) << agg.Stderr();
  const Scrape s = ScrapeMetrics(metrics_port);
  EXPECT_EQ(s.status, 200);
  EXPECT_NE(s.content_type.find("text/plain"), std::string::npos) << s.content_type;
  const auto k = static_cast<size_t>(s.at("shoal_last_completed_round"));
  ASSERT_GE(k, 3u);
  // The metrics line of round k is written before the round is published. The codec label is
  // the canonical spec.
  const auto lines = ReadJsonLines(dir + "/run.jsonl");
  ASSERT_GE(lines.size(), k);
  double up = 0, down = 0, dense = 0, reported = 0, seconds_sum = 0;
  for (size_t i = 0; i < k; ++i) {
    up += lines[i]["bytes_up"].get<double>();
    down += lines[i]["bytes_down"].get<double>();
    dense += lines[i]["bytes_dense_equiv"].get<double>();
    reported += lines[i]["clients_reported"].get<double>();
    seconds_sum += lines[i]["seconds"].get<double>();
  }
  const auto& last = lines[k - 1];
  EXPECT_EQ(s.at("shoal_rounds_completed_total"), k);
  EXPECT_EQ(s.at(R"(shoal_bytes_total{direction="up",codec="int8:chunk=256,stochastic=0"})"), up);
  EXPECT_EQ(s.at(R"(shoal_bytes_total{direction="down",codec="int8:chunk=256,stochastic=0"})"), down);
  EXPECT_EQ(s.at("shoal_dense_equivalent_bytes_total"), dense);
  EXPECT_EQ(s.at("shoal_clients_reported_total"), reported);
  EXPECT_EQ(s.at("shoal_clients_registered"), 3);
  EXPECT_EQ(s.at("shoal_round_duration_seconds_count"), k);
  EXPECT_NEAR(s.at("shoal_round_duration_seconds_sum"), seconds_sum, 1e-9);
  EXPECT_NEAR(s.at("shoal_test_accuracy"), last["test_accuracy"].get<double>(), 1e-12);
  EXPECT_NEAR(s.at("shoal_test_loss"), last["test_loss"].get<double>(), 1e-12);
  EXPECT_EQ(s.at("shoal_connections_total"), last["connections"].get<double>());
  EXPECT_GE(s.at("shoal_current_round"), k);
  EXPECT_EQ(s.at(R"(shoal_build_info{version=")" SHOAL_VERSION_STRING R"(",program="shoal-aggregator"})"), 1);
  EXPECT_GT(s.at("process_resident_memory_bytes"), 1e6);
  EXPECT_GT(s.at("process_cpu_seconds_total"), 0);
  EXPECT_NEAR(s.at("process_start_time_seconds"), static_cast<double>(time(nullptr)), 600);

  // Other paths and methods are answered, and the service goes on (Debian's civetweb crashed
  // the process writing its own 404 page: every request but GET /metrics is answered by us).
  const std::string base = "http://127.0.0.1:" + std::to_string(metrics_port);
  EXPECT_EQ(StatusOf(base + "/nothing"), 404);
  EXPECT_EQ(StatusOf(base + "/metrics/x"), 404);
  EXPECT_EQ(StatusOf(base + "/metrics", "POST"), 405);
  EXPECT_EQ(StatusOf(base + "/metrics", "DELETE"), 405);
  // A later scrape has moved on.
  ASSERT_TRUE(WaitFor([&] { return ReadJsonLines(dir + "/run.jsonl").size() >= k + 2; }, seconds(60)));
  EXPECT_GT(ScrapeMetrics(metrics_port).at("shoal_rounds_completed_total"), k);
  agg.Signal(SIGTERM);
  EXPECT_EQ(agg.Wait(seconds(30)), 0) << agg.Stderr();
  for (auto& c : clients) c->Signal(SIGTERM);
}

// A peer's endpoint: its steps and bytes as its metrics file has them.
TEST(Telemetry, PeerScrapeMatchesTheMetricsFile) {
  const std::string dir = TempDir("prometheus-peer");
  const int p0 = FreePort(), p1 = FreePort(), metrics_port = FreePort();
  const std::vector<std::string> task = {"--model", "mlp:32", "--seed", "7", "--min-peers", "2", "--eval-every", "5",
                                         "--partition-scheme", "iid", "--device", "cpu"};
  Process a("shoal-peer",
            Concat({"--listen", Endpoint(p0), "--name", "a", "--partition", "0/2", "--metrics-out", dir + "/a.jsonl",
                    "--metrics-listen", std::to_string(metrics_port)},
                   task),
            dir + "/a", kOneThread);
  Process b("shoal-peer", Concat({"--listen", Endpoint(p1), "--name", "b", "--partition", "1/2", "--peers", Endpoint(p0)}, task),
            dir + "/b", kOneThread);
  auto steps = [&] { return ReadJsonLines(dir + "/a.jsonl"); };
  ASSERT_TRUE(WaitFor([&] { return steps().size() >= 12; }, seconds(60))) << a.Stderr();
  const Scrape s = ScrapeMetrics(metrics_port);
  EXPECT_EQ(s.status, 200);
  const auto step = static_cast<uint64_t>(s.at("shoal_peer_step"));
  // The line of a step is written just after it is published.
  ASSERT_TRUE(WaitFor([&] { return steps().back()["step"].get<uint64_t>() >= step; }, seconds(10)));
  double sent = 0, received = 0;
  nlohmann::json last_eval;
  for (const auto& line : steps())
    if (line["step"].get<uint64_t>() <= step) {
      sent += line["bytes_sent"].get<double>();
      received += line["bytes_received"].get<double>();
      if (line.contains("test_accuracy")) last_eval = line;
    }
  EXPECT_EQ(s.at(R"(shoal_bytes_total{direction="sent"})"), sent);
  EXPECT_EQ(s.at(R"(shoal_bytes_total{direction="received"})"), received);
  EXPECT_EQ(s.at("shoal_peer_members"), 2);
  ASSERT_FALSE(last_eval.is_null());
  EXPECT_NEAR(s.at("shoal_test_accuracy"), last_eval["test_accuracy"].get<double>(), 1e-12);
  EXPECT_EQ(s.at(R"(shoal_build_info{version=")" SHOAL_VERSION_STRING R"(",program="shoal-peer"})"), 1);
  for (Process* p : {&a, &b}) p->Signal(SIGTERM);
  for (Process* p : {&a, &b}) EXPECT_EQ(p->Wait(seconds(30)), 0) << p->Stderr();
}

// The width and height a PNG file declares (its IHDR chunk), or {0, 0}.
std::pair<uint32_t, uint32_t> PngSize(const std::string& path) {
  const std::string png = ReadFile(path);
  if (png.size() < 24 || png.compare(1, 3, "PNG") != 0) return {0, 0};
  auto be32 = [&](size_t at) {
    return (uint32_t{uint8_t(png[at])} << 24) | (uint32_t{uint8_t(png[at + 1])} << 16) |
           (uint32_t{uint8_t(png[at + 2])} << 8) | uint32_t{uint8_t(png[at + 3])};
  };
  return {be32(16), be32(20)};
}

// The live status page in a real browser: headless Chromium loads it during a run, its script
// fetches /status.json and draws; the DOM it leaves shows every round of the metrics file up
// to then and both clients. A screenshot is kept in build/test-artifacts/status-page.png.
TEST(Telemetry, StatusPageRendersInHeadlessChromium) {
  const std::string dir = TempDir("status-page");
  const int port = FreePort(), status_port = FreePort();
  auto args = Concat(AggregatorArgs(port, 0, 2, dir + "/run.jsonl"), {"--status-listen", std::to_string(status_port)});
  SetFlag(args, "--model", "mlp:128");
  Process agg("shoal-aggregator", args, dir + "/agg", kOneThread);
  auto clients = StartClients(port, 2, dir);
  ASSERT_TRUE(WaitFor([&] { return ReadJsonLines(dir + "/run.jsonl").size() >= 3; }, seconds(60))) << agg.Stderr();
  const std::string url = "http://127.0.0.1:" + std::to_string(status_port) + "/";
  // --virtual-time-budget lets the page's fetch and timers run before the DOM is dumped.
  // Each run has a profile of its own.
  auto browser = [&](const std::string& run) {
    return std::vector<std::string>{"--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + dir + "/" + run,
                                     "--virtual-time-budget=4000", "--window-size=1300,900"};
  };
  Process dump("/usr/bin/chromium", Concat(browser("dump"), {"--dump-dom", url}), dir + "/dump");
  ASSERT_EQ(dump.Wait(seconds(60)), 0) << dump.Stderr();
  const std::string dom = dump.Stdout();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom, m, std::regex(R"re(data-rendered-rounds="(\d+)")re"))) << dom.substr(0, 2000);
  const size_t rendered = std::stoul(m[1]);
  EXPECT_GE(rendered, 3u) << "the charts drew the completed rounds";
  EXPECT_LE(rendered, ReadJsonLines(dir + "/run.jsonl").size());
  size_t rows = 0;
  for (size_t at = dom.find("<tr class=\"client\">"); at != std::string::npos; at = dom.find("<tr class=\"client\">", at + 1))
    ++rows;
  EXPECT_EQ(rows, 2u) << "one row per registered client";
  EXPECT_NE(dom.find("-part0-of-2</td>"), std::string::npos);
  EXPECT_NE(dom.find("clients registered"), std::string::npos);
  EXPECT_NE(dom.find("<div id=\"error\"></div>"), std::string::npos) << "no fetch failed";

  const std::string artifacts = BinDir() + "/../test-artifacts";
  std::filesystem::create_directories(artifacts);
  const std::string shot = artifacts + "/status-page.png";
  std::filesystem::remove(shot);
  Process screenshot("/usr/bin/chromium", Concat(browser("screenshot"), {"--screenshot=" + shot, url}), dir + "/screenshot");
  ASSERT_EQ(screenshot.Wait(seconds(60)), 0) << screenshot.Stderr();
  EXPECT_EQ(PngSize(shot), (std::pair<uint32_t, uint32_t>{1300, 900}));
  EXPECT_GT(std::filesystem::file_size(shot), 20000u) << "a page with charts, not a blank one";

  EXPECT_EQ(StatusOf(url + "favicon.ico"), 404);
  EXPECT_EQ(StatusOf(url + "status.json", "POST"), 405);
  // The JSON the page reads, against the metrics file: round 1's figures, both clients.
  const auto lines = ReadJsonLines(dir + "/run.jsonl");
  std::string body;
  CURL* curl = curl_easy_init();
  const std::string json_url = url + "status.json";
  curl_easy_setopt(curl, CURLOPT_URL, json_url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  ASSERT_EQ(curl_easy_perform(curl), CURLE_OK);
  curl_easy_cleanup(curl);
  const auto status = nlohmann::json::parse(body);
  ASSERT_GE(status["rounds"].size(), 3u);
  EXPECT_EQ(status["rounds"][0]["test_accuracy"], lines[0]["test_accuracy"]);
  EXPECT_EQ(status["rounds"][0]["bytes_up"], lines[0]["bytes_up"]);
  ASSERT_EQ(status["clients"].size(), 2u);
  for (const auto& c : status["clients"]) {
    EXPECT_GT(c["bytes_up"].get<uint64_t>(), 0u);
    EXPECT_GE(c["rounds_reported"].get<uint64_t>(), 2u);
    EXPECT_LT(c["seconds_since_seen"].get<double>(), 5.0);
  }
  agg.Signal(SIGTERM);
  EXPECT_EQ(agg.Wait(seconds(30)), 0) << agg.Stderr();
  for (auto& c : clients) c->Signal(SIGTERM);
}

// --log-format json: every line of a run's stderr is one JSON object with the time, level,
// program and message, including a fatal error whose message holds quotes and backslashes.
TEST(Telemetry, JsonLogsAreOneObjectPerLine) {
  const std::string dir = TempDir("json-logs");
  const int port = FreePort();
  auto args = Concat(AggregatorArgs(port, 3, 1, dir + "/run.jsonl"), {"--log-format", "json"});
  Process agg("shoal-aggregator", args, dir + "/agg", kOneThread);
  auto clients = StartClients(port, 1, dir);
  ASSERT_EQ(agg.Wait(seconds(60)), 0) << agg.Stderr();
  ExpectAllExitZero(clients);
  const std::string odd = dir + "/no \"such\" \\ file.csv";
  Process bad("shoal-aggregator", {"--listen", Endpoint(FreePort()), "--dataset", "csv:" + odd, "--log-format", "json"},
              dir + "/bad");
  EXPECT_EQ(bad.Wait(seconds(30)), 1);
  for (const std::string& log : {agg.Stderr(), bad.Stderr()}) {
    std::istringstream lines(log);
    int count = 0;
    for (std::string line; std::getline(lines, line); ++count) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      ASSERT_TRUE(j.is_object()) << line;
      for (const char* key : {"time", "level", "program", "message"}) EXPECT_TRUE(j.contains(key)) << line;
    }
    EXPECT_GT(count, 0);
  }
  EXPECT_NE(agg.Stderr().find(R"("message":"round 3 done)"), std::string::npos) << agg.Stderr();
  const auto last = nlohmann::json::parse(bad.Stderr().substr(bad.Stderr().rfind('{')));
  EXPECT_EQ(last["level"], "error");
  EXPECT_NE(last["message"].get<std::string>().find(odd), std::string::npos) << last;
}

// deploy/aggregator.conf runs as shipped, with only its paths moved (the command line wins over
// the file): CURVE with an allow-list, both HTTP endpoints, and resume = true, which starts at
// round 1 with no checkpoint and continues from the last one after a restart, as the systemd
// unit's Restart= relies on.
TEST(Deploy, TheExampleConfigServesAndResumes) {
  const std::string dir = TempDir("deploy");
  MakeKeys(dir + "/keys", {"agg", "c0"});
  std::filesystem::create_directories(dir + "/keys/allow");
  std::filesystem::copy_file(dir + "/keys/c0.pub", dir + "/keys/allow/c0.pub");
  const int port = FreePort();
  auto start = [&](int rounds) {
    return std::make_unique<Process>(
        "shoal-aggregator",
        Concat({"--config", std::string(SHOAL_SOURCE_DIR) + "/deploy/aggregator.conf", "--listen", Endpoint(port),
                "--checkpoint-dir", dir + "/ckpt", "--metrics-out", dir + "/rounds.jsonl", "--metrics-listen",
                std::to_string(FreePort()), "--status-listen", std::to_string(FreePort()), "--rounds",
                std::to_string(rounds), "--min-clients", "1", "--log-format", "json"},
               SecureAggregatorFlags(dir + "/keys", dir + "/keys/allow")),
        dir + "/agg" + std::to_string(rounds), kOneThread);
  };
  auto client = [&](int run) {
    return std::make_unique<Process>("shoal-client",
                                     Concat(ClientArgs(port, 0, 1), SecureClientFlags(dir + "/keys", "c0")),
                                     dir + "/client" + std::to_string(run), kOneThread);
  };
  {
    auto agg = start(2);
    auto c = client(1);
    ASSERT_EQ(agg->Wait(seconds(60)), 0) << agg->Stderr();
    EXPECT_NE(agg->Stderr().find("no checkpoint in"), std::string::npos);
    EXPECT_EQ(c->Wait(seconds(30)), 0) << c->Stderr();
  }
  auto agg = start(4);
  auto c = client(2);
  ASSERT_EQ(agg->Wait(seconds(60)), 0) << agg->Stderr();
  EXPECT_NE(agg->Stderr().find("resumed from"), std::string::npos) << agg->Stderr();
  const auto lines = ReadJsonLines(dir + "/rounds.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["round"], i + 1);
  EXPECT_TRUE(lines.back()["secure"].get<bool>());
}

// The shipped unit's key steps (docs/DEPLOY.md): a fixed service user that owns a 0600 key, not
// a DynamicUser= that would need group bits on it. Followed with `nobody` standing in for
// `shoal` (it needs root to change users; skipped otherwise): the aggregator started as that
// user reads the key and serves a CURVE client a round; the steps the document used to give
// (a 0640 key for a group) are refused with the reason.
TEST(Deploy, TheUnitsUserReadsItsKey) {
  const std::string unit = ReadFile(std::string(SHOAL_SOURCE_DIR) + "/deploy/shoal-aggregator.service");
  EXPECT_NE(unit.find("\nUser=shoal\n"), std::string::npos) << unit;
  EXPECT_EQ(unit.find("\nDynamicUser="), std::string::npos) << unit;
  EXPECT_NE(ReadFile(std::string(SHOAL_SOURCE_DIR) + "/docs/DEPLOY.md").find("chown shoal:shoal /etc/shoal/aggregator.key"),
            std::string::npos);
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to start the aggregator as another user";
  const std::string dir = TempDir("deploy-user");
  namespace fs = std::filesystem;
  MakeKeys(dir + "/keys", {"agg", "c0"});
  fs::create_directories(dir + "/allow");
  fs::copy_file(dir + "/keys/c0.pub", dir + "/allow/c0.pub");
  fs::create_directories(dir + "/state");
  // The unit's CacheDirectory (SHOAL_DATA_DIR): the datasets, readable by the service user.
  const char* data_env = std::getenv("SHOAL_DATA_DIR");
  const std::string data = data_env ? data_env : std::string(std::getenv("HOME")) + "/.cache/shoal";
  fs::create_directories(dir + "/cache");
  fs::copy_file(data + "/digits.csv.gz", dir + "/cache/digits.csv.gz");
  fs::permissions(dir + "/cache", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                      fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(dir + "/cache/digits.csv.gz", fs::perms::owner_read | fs::perms::owner_write |
                                                    fs::perms::group_read | fs::perms::others_read);
  const uid_t nobody = 65534;
  const gid_t nogroup = 65534;
  for (const std::string& p : {dir, dir + "/allow", dir + "/allow/c0.pub", dir + "/keys", dir + "/keys/agg.pub"})
    fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                           fs::perms::others_exec);
  ASSERT_EQ(::chown((dir + "/state").c_str(), nobody, nogroup), 0);
  ASSERT_EQ(::chown((dir + "/keys/agg.key").c_str(), nobody, nogroup), 0) << "chown shoal:shoal aggregator.key";
  const int port = FreePort();
  auto as_nobody = [&](const std::string& log) {
    return std::make_unique<Process>(
        "/usr/bin/setpriv",
        Concat({"--reuid=65534", "--regid=65534", "--clear-groups", BinDir() + "/shoal-aggregator", "--config",
                std::string(SHOAL_SOURCE_DIR) + "/deploy/aggregator.conf", "--listen", Endpoint(port),
                "--checkpoint-dir", dir + "/state/ckpt", "--metrics-out", dir + "/state/rounds.jsonl",
                "--metrics-listen", std::to_string(FreePort()), "--status-listen", std::to_string(FreePort()),
                "--rounds", "1", "--min-clients", "1", "--data-dir", dir + "/cache"},
               SecureAggregatorFlags(dir + "/keys", dir + "/allow")),
        log, kOneThread);
  };
  {
    auto agg = as_nobody(dir + "/agg");
    Process c("shoal-client", Concat(ClientArgs(port, 0, 1), SecureClientFlags(dir + "/keys", "c0")), dir + "/client",
              kOneThread);
    ASSERT_EQ(agg->Wait(seconds(60)), 0) << agg->Stderr();
    EXPECT_EQ(c.Wait(seconds(30)), 0) << c.Stderr();
    ASSERT_EQ(ReadJsonLines(dir + "/state/rounds.jsonl").size(), 1u);
  }
  // The old steps: the key readable by a group.
  fs::permissions(dir + "/keys/agg.key", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  auto refused = as_nobody(dir + "/agg-0640");
  EXPECT_NE(refused->Wait(seconds(30)), 0);
  EXPECT_NE(refused->Stderr().find("chmod 600"), std::string::npos) << refused->Stderr();
}

}  // namespace
}  // namespace shoal::testing
