// A real federation inside one process, for the runtime's unit tests: the aggregator Service
// on its own thread and N real Clients (each on a thread running Client::Run, or all driven
// with Client::Poll from the test's thread), connected over one in-process Network whose
// links the test shapes (latency, loss, cuts). The clients train the built-in trainer on
// their partition of a small blobs CSV; the test reads what happened from the service's
// metrics JSONL and from each client's stats and events.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "blobs_csv.h"
#include "runtime/client/hooks.h"
#include "runtime/server/service.h"
#include "shoal/client.h"
#include "shoal/trainer.h"
#include "temp_dir.h"
#include "transport/inproc/network.h"

namespace shoal::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using Json = nlohmann::json;
using aggregator::AggregatorOptions;
using transport::inproc::LinkProfile;
using transport::inproc::Network;

inline constexpr char kAggregatorName[] = "aggregator";
// How long a test's federation may take at most (each needs a few seconds at most; a hang
// fails the test instead of blocking the binary).
inline constexpr milliseconds kRunLimit(20000);

// Polls `done` every 5 ms until it holds or `limit` passes; returns whether it holds.
inline bool WaitUntil(const std::function<bool()>& done, milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// Why Service::Create refuses `o` (its message), or "" when it accepts it.
inline std::string CreateRefusal(const AggregatorOptions& o) {
  auto net = Network::Create(1);
  auto listener = net->Listen(kAggregatorName);
  if (!listener.ok()) return "no listener: " + listener.status().message();
  auto service = aggregator::Service::Create(o, std::move(*listener));
  return service.ok() ? std::string() : service.status().message();
}

// How one client is connected: its two links, and optionally a wrapper around its channel
// (to drop chosen frames, for instance).
using ChannelWrap = std::function<std::unique_ptr<transport::Channel>(std::unique_ptr<transport::Channel>)>;
struct ClientLinks {
  LinkProfile up, down;
  ChannelWrap wrap;
};

// Links whose up direction (client to aggregator) adds `latency` to every frame, or loses
// each frame with probability `loss`.
inline ClientLinks SlowUp(milliseconds latency) {
  ClientLinks l;
  l.up.latency = latency;
  return l;
}
inline ClientLinks LossyUp(double loss) {
  ClientLinks l;
  l.up.loss = loss;
  return l;
}

// Links for AddClients: `special` for client `which`, perfect links for the others.
inline std::function<ClientLinks(uint32_t)> OnlyClient(uint32_t which, ClientLinks special) {
  return [which, special = std::move(special)](uint32_t i) { return i == which ? special : ClientLinks{}; };
}

// One real client and what the test saw of it.
struct Member {
  std::string name;
  std::string peer;  // its first routing id at the listener ("aggregator#N")
  std::unique_ptr<Client> client;
  std::atomic<int> welcomes{0};     // kConnected events: one per registration
  std::atomic<int> rounds_done{0};  // kRoundDone events: updates acknowledged
  std::atomic<bool> finished{false};
  Status result;  // what Run (or the last Poll) returned; valid once `finished`
  std::thread thread;
};

class Federation {
 public:
  // The service with `options` (listening on kAggregatorName) on a fresh network seeded with
  // `seed`. Check ok() before using it.
  Federation(AggregatorOptions options, uint64_t seed) : options_(std::move(options)), net_(Network::Create(seed)) {
    auto listener = net_->Listen(kAggregatorName);
    if (!listener.ok()) {
      ADD_FAILURE() << listener.status().ToString();
      return;
    }
    auto service = aggregator::Service::Create(options_, std::move(*listener));
    if (!service.ok()) {
      ADD_FAILURE() << service.status().ToString();
      return;
    }
    service_ = std::move(*service);
  }
  ~Federation() { Stop(); }
  Federation(const Federation&) = delete;
  Federation& operator=(const Federation&) = delete;

  bool ok() const { return service_ != nullptr; }
  aggregator::Service& service() { return *service_; }
  Network& net() { return *net_; }
  size_t size() const { return members_.size(); }
  Member& member(size_t i) { return *members_[i]; }

  // Wraps each built-in trainer AddClients makes (e.g. to change what it says it can do).
  std::function<std::unique_ptr<Trainer>(std::unique_ptr<Trainer>)> wrap_trainer;

  // Adds `n` clients named client-I, client I training on partition I of n and connected with
  // links(I) (default: perfect links). With `train_inline` they train inside Poll (for
  // PollClients).
  void AddClients(uint32_t n, const std::function<ClientLinks(uint32_t)>& links = nullptr, bool train_inline = false) {
    for (uint32_t i = 0; i < n; ++i) {
      auto m = std::make_unique<Member>();
      m->name = "client-" + std::to_string(i);
      BuiltinTrainerOptions to;
      to.dataset = options_.dataset;
      to.data_dir = options_.data_dir;
      to.partition_index = i;
      to.partition_count = n;
      to.device = "cpu";
      to.seed = options_.seed;
      auto trainer = MakeBuiltinTrainer(to);
      if (!trainer.ok()) {
        ADD_FAILURE() << trainer.status().ToString();
        return;
      }
      ClientOptions co;
      co.name = m->name;
      co.connect = std::string("inproc-sim://") + kAggregatorName;
      co.connect_timeout_ms = 10000;  // a failing test ends instead of waiting for the defaults
      co.reconnect_timeout_ms = 10000;
      Member* seen = m.get();
      co.on_event = [seen](const ClientEvent& e) {
        if (e.kind == ClientEvent::Kind::kConnected) ++seen->welcomes;
        if (e.kind == ClientEvent::Kind::kRoundDone) ++seen->rounds_done;
      };
      const ClientLinks l = links ? links(i) : ClientLinks{};
      // Connection numbers count every connection the network opened: this one is the next.
      m->peer = std::string(kAggregatorName) + "#" + std::to_string(net_->stats().connections);
      ClientHooks hooks;
      hooks.channel = net_->Connect(kAggregatorName, l.up, l.down);
      if (l.wrap) hooks.channel = l.wrap(std::move(hooks.channel));
      hooks.train_inline = train_inline;
      std::unique_ptr<Trainer> t = std::move(*trainer);
      if (wrap_trainer) t = wrap_trainer(std::move(t));
      m->client = ClientFactory::Make(std::move(co), std::move(t), std::move(hooks));
      members_.push_back(std::move(m));
    }
  }

  void StartService() {
    if (service_thread_.joinable()) return;
    service_thread_ = std::thread([this] {
      service_result_ = service_->Run(stop_);
      service_done_ = true;
    });
  }

  // One thread per client, each running Client::Run.
  void StartClients() {
    for (auto& m : members_)
      m->thread = std::thread([m = m.get()] {
        m->result = m->client->Run();
        m->finished = true;
      });
  }

  // Drives every client with Poll from this thread until all are finished or `limit` passes.
  void PollClients(milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!AllFinished() && Clock::now() < deadline)
      for (auto& m : members_) {
        if (m->finished) continue;
        bool finished = false;
        Status st = m->client->Poll(2, &finished);
        if (finished) {
          m->result = st;
          m->finished = true;
        }
      }
    EXPECT_TRUE(AllFinished()) << "polled clients did not finish within " << limit.count() << " ms";
  }

  // Waits up to `limit` for the service to complete its rounds, then briefly for every client
  // to return after its Bye; what still runs then is stopped (and the test fails).
  void Finish(milliseconds limit) {
    EXPECT_TRUE(WaitUntil([this] { return service_done_.load(); }, limit))
        << "the service did not complete " << options_.rounds << " rounds within " << limit.count() << " ms";
    EXPECT_TRUE(WaitUntil([this] { return AllFinished(); }, milliseconds(3000)))
        << "clients still running after the service finished";
    Stop();
    EXPECT_TRUE(service_result_.ok()) << service_result_.ToString();
    EXPECT_EQ(service_->rounds_completed(), options_.rounds);
  }

  // The whole run: starts the service (unless started), runs the clients on their threads
  // (or, with `poll`, polls them from this one: see PollClients), waits for the end (Finish)
  // and returns the metrics lines.
  std::vector<Json> Run(milliseconds limit, bool poll = false) {
    StartService();
    if (poll)
      PollClients(limit);
    else
      StartClients();
    Finish(limit);
    return Metrics();
  }

  // The metrics lines written so far (complete lines only: the service may be writing one).
  std::vector<Json> Metrics() const {
    std::vector<Json> lines;
    std::ifstream in(options_.metrics_out);
    std::string line;
    while (std::getline(in, line) && !in.eof()) {
      Json j = Json::parse(line, nullptr, false);
      if (!j.is_discarded()) lines.push_back(std::move(j));
    }
    return lines;
  }

  // Every client returned OK from Run (or Poll): it received the service's Bye.
  void ExpectEveryClientSaidBye() {
    for (auto& m : members_) {
      EXPECT_TRUE(m->finished) << m->name;
      EXPECT_TRUE(m->result.ok()) << m->name << ": " << m->result.ToString();
    }
  }

 private:
  bool AllFinished() const {
    for (const auto& m : members_)
      if (!m->finished) return false;
    return true;
  }
  // Idempotent: ends whatever still runs.
  void Stop() {
    stop_ = true;
    for (auto& m : members_)
      if (!m->finished) m->client->Cancel();
    if (service_thread_.joinable()) service_thread_.join();
    for (auto& m : members_)
      if (m->thread.joinable()) m->thread.join();
  }

  AggregatorOptions options_;
  std::shared_ptr<Network> net_;
  std::unique_ptr<aggregator::Service> service_;  // destroyed after the clients (below)
  std::vector<std::unique_ptr<Member>> members_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> service_done_{false};
  Status service_result_;
  std::thread service_thread_;
};

// Each test writes a blobs CSV (300 rows, 6 features, 3 classes) into its own directory.
class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { WriteBlobsCsv(csv_, 300, 6, 3, 11); }

  // A service for `clients` clients (it waits for all of them), `rounds` rounds, short
  // heartbeats, rounds that close `round_timeout_ms` after their tasks went out, a linear
  // model learning slowly enough to watch, metrics in the test directory.
  AggregatorOptions Options(uint32_t clients, uint64_t rounds, uint32_t round_timeout_ms = 2000,
                            const std::string& metrics = "metrics.jsonl") const {
    AggregatorOptions o;
    o.listen = std::string("inproc-sim://") + kAggregatorName;
    o.rounds = rounds;
    o.min_clients = clients;
    o.model = "linear";
    o.dataset = "csv:" + csv_;
    o.data_dir = dir_.path();
    o.seed = 7;
    o.test_fraction = 0.25;
    o.strategy.learning_rate = 0.02f;
    o.strategy.local_steps = 1;
    o.batch_size = 16;
    o.round_timeout_ms = round_timeout_ms;
    o.heartbeat_interval_ms = 100;
    o.heartbeat_timeout_ms = 1500;
    o.metrics_out = dir_.File(metrics);
    o.print_table = false;
    o.device = "cpu";
    return o;
  }

  // One round's metrics line: `selected` clients took part, `reported` of them were counted
  // (the others dropped), and the model was updated.
  static void ExpectRound(const Json& line, size_t selected, size_t reported) {
    SCOPED_TRACE(line.dump());
    EXPECT_EQ(line["clients_selected"].get<size_t>(), selected);
    EXPECT_EQ(line["clients_reported"].get<size_t>(), reported);
    EXPECT_EQ(line["clients_dropped"].get<size_t>(), selected - reported);
    EXPECT_TRUE(line["model_updated"].get<bool>());
  }

  // `lines` are rounds 1..rounds, in order.
  static void ExpectRounds(const std::vector<Json>& lines, uint64_t rounds) {
    ASSERT_EQ(lines.size(), rounds);
    for (uint64_t r = 0; r < rounds; ++r) EXPECT_EQ(lines[r]["round"].get<uint64_t>(), r + 1);
  }

  TempDir dir_;
  const std::string csv_ = dir_.File("blobs.csv");
};

}  // namespace shoal::testing
