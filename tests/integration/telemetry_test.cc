// The Prometheus endpoints of shoal-aggregator and shoal-peer, scraped during real runs with a
// real HTTP client (libcurl), their values checked against the same runs' metrics files.
#include <curl/curl.h>
#include <gtest/gtest.h>

#include <csignal>
#include <ctime>
#include <map>
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

}  // namespace
}  // namespace shoal::testing
