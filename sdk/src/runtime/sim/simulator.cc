#include "runtime/sim/simulator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include <time.h>

#include "core/rng.h"
#include "nn/builtin_trainer.h"
#include "runtime/client/hooks.h"
#include "shoal/data.h"
#include "transport/inproc/network.h"

namespace shoal::sim {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr const char* kListenName = "aggregator";
// Streams of the task seed that only the simulator uses (links, churn), apart from the split,
// partition and shuffle streams every process derives from the same seed.
constexpr uint64_t kLinkSeedTag = 0x73696d2d6c696e6bULL;   // "sim-link"
constexpr uint64_t kChurnSeedTag = 0x73696d2d63687572ULL;  // "sim-chur"
constexpr uint64_t kFaultSeedTag = 0x73696d2d666c6170ULL;  // "sim-flap": partition and flapping groups

// CPU seconds this thread has used.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string EdgeName(uint32_t k) { return "edge-" + std::to_string(k); }

uint64_t PeakRssBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// One round of the built-in trainer on a shared part, made for the round and dropped after it.
Status TrainOnPart(const BuiltinTrainerOptions& options, const std::shared_ptr<const data::Dataset>& part,
                   const TaskConfig& task, std::span<const float> global, const RoundConfig& round,
                   const TrainContext& ctx, TrainResult* out) {
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, nn::MakeBuiltinTrainerOnPart(options, part));
  SHOAL_RETURN_IF_ERROR(t->Configure(task));
  return t->Train(global, round, ctx, out);
}

// One virtual client and what the simulator knows of it. Everything but `die` is touched only
// by the thread that drives the client (its hooks and its trainer run inside its Poll).
struct Slot {
  uint32_t index = 0;
  std::string name;
  uint32_t part = 0;
  std::string target;  // the aggregator it joins: the root, or its edge
  transport::inproc::LinkProfile up, down;
  bool partitioned = false;            // in the group a partition cuts off
  std::optional<uint32_t> flap_phase;  // flapping: its offset into the flap cycle, in ms
  std::shared_ptr<std::atomic<bool>> link_down;  // this client's links, both ways (made with it)
  std::unique_ptr<Client> client;
  std::atomic<bool> die{false};  // dead: nothing more leaves; its driver removes it after this Poll
  DeathPoint died_at = DeathPoint::kTask;
  // This round's churn: the point it dies at, or the time (random); nothing when it lives.
  std::optional<ChurnAt> doom;
  std::optional<Clock::time_point> doom_time;
  DeathPoint reached = DeathPoint::kTask;  // the last point of its round it got to
  std::optional<Clock::time_point> restart_at;  // dead until then (no client and no restart: finished)

  // Dies now, where it is: its links go down at once, so nothing it sends from here leaves.
  void Kill(DeathPoint where) {
    if (die.load()) return;
    *link_down = true;
    died_at = where;
    die = true;
  }
  // Dies if its random time has come.
  void KillIfDue(Clock::time_point now) {
    if (doom_time && now >= *doom_time) Kill(reached);
  }
};

// The client got to `where`: it dies there if churn chose `at` for it, or if its time is up.
void Reach(Slot& s, DeathPoint where, ChurnAt at, Clock::time_point now) {
  s.reached = where;
  if (s.doom == at) s.Kill(where);
  s.KillIfDue(now);
}

// A virtual client's trainer: TrainOnPart, so an idle client holds no model, optimizer or data
// of its own; an attacker's result then goes through the attack.
class SimTrainer final : public Trainer {
 public:
  SimTrainer(const BuiltinTrainerOptions& options, std::shared_ptr<const data::Dataset> part, Slot* slot,
             Attack* attack)
      : options_(options), part_(std::move(part)), slot_(slot), attack_(attack) {}
  std::string name() const override { return "builtin-sim"; }
  Status Configure(const TaskConfig& task) override {
    if (task.optimizer.name == "demo")
      return Status::InvalidArgument(
          "shoal-sim does not run --client-optimizer demo: DeMo's momentum lives in the client between rounds, "
          "which virtual clients do not keep");
    task_ = task;
    return Status::Ok();
  }
  uint64_t num_examples() const override { return static_cast<uint64_t>(part_->n); }
  Status Train(std::span<const float> global, const RoundConfig& round, const TrainContext& ctx,
               TrainResult* out) override {
    if (slot_->die.load()) return Status::Cancelled("the simulator killed this client");
    slot_->reached = DeathPoint::kTraining;
    SHOAL_RETURN_IF_ERROR(TrainOnPart(options_, part_, task_, global, round, ctx, out));
    // Training took its time: a death due during it, or one at its end, loses the work.
    if (slot_->doom == ChurnAt::kTrain) slot_->Kill(DeathPoint::kTraining);
    slot_->KillIfDue(Clock::now());
    if (slot_->die.load()) return Status::Cancelled("the simulator killed this client in training");
    return attack_ ? attack_->Corrupt(slot_->index, task_, global, round, out) : Status::Ok();
  }

 private:
  const BuiltinTrainerOptions& options_;
  std::shared_ptr<const data::Dataset> part_;
  Slot* slot_;
  Attack* attack_;  // null for an honest client
  TaskConfig task_;
};

// The part with every label y replaced by C - 1 - y (the label-flip attack's data).
std::shared_ptr<const data::Dataset> FlippedLabels(const data::Dataset& part) {
  auto flipped = std::make_shared<data::Dataset>(part);
  for (int32_t& y : flipped->y) y = part.num_classes - 1 - y;
  return flipped;
}

double LogNormal(Rng& rng, double median, double spread) {
  return spread > 0.0 ? median * std::exp(spread * rng.Normal()) : median;
}

}  // namespace

StatusOr<ChurnAt> ParseChurnAt(const std::string& name) {
  static const std::pair<const char*, ChurnAt> kNames[] = {{"start", ChurnAt::kStart},   {"train", ChurnAt::kTrain},
                                                           {"keys", ChurnAt::kKeys},     {"upload", ChurnAt::kUpload},
                                                           {"unmask", ChurnAt::kUnmask}, {"random", ChurnAt::kRandom}};
  for (const auto& [n, at] : kNames)
    if (name == n) return at;
  return Status::InvalidArgument("--churn-at '" + name + "': expected start, train, keys, upload, unmask or random");
}

const char* DeathPointName(DeathPoint p) {
  switch (p) {
    case DeathPoint::kTask: return "on its task";
    case DeathPoint::kTraining: return "in training";
    case DeathPoint::kShares: return "after its key shares";
    case DeathPoint::kUpdate: return "after its update";
    case DeathPoint::kUnmask: return "at unmask";
    case DeathPoint::kCount: break;
  }
  return "?";
}

class Simulator::Impl {
 public:
  explicit Impl(SimOptions o) : o_(std::move(o)) {}
  Status Init();
  StatusOr<SimReport> Run(const std::atomic<bool>& stop);

 private:
  void MakeClient(Slot& s);
  void AtPoint(Slot& s, RoundPoint point, uint64_t round);
  bool LinkDown(const Slot& s, Clock::time_point now) const;
  void Drive(uint32_t thread, const std::atomic<bool>& stop);
  // The edge aggregators, each joining the running root and then serving on its own thread.
  Status StartEdges();
  void StopEdges();

  SimOptions o_;
  std::shared_ptr<transport::inproc::Network> net_;
  std::unique_ptr<aggregator::Service> service_;  // the root
  aggregator::AggregatorOptions edge_options_;    // with --edges: each edge's, but its name and clients
  std::vector<std::unique_ptr<aggregator::Service>> edges_;
  std::vector<std::thread> edge_threads_;
  std::atomic<uint32_t> edges_running_{0};
  std::atomic<bool> edges_stop_{false};
  std::shared_ptr<ReplicaCache> replicas_ = std::make_shared<ReplicaCache>();
  BuiltinTrainerOptions trainer_options_;
  std::vector<std::shared_ptr<const data::Dataset>> parts_;
  std::unique_ptr<Attack> attack_;  // null without --attack
  std::vector<std::shared_ptr<const data::Dataset>> flipped_parts_;  // label-flip: parts_ with labels flipped
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<bool> service_done_{false};
  std::atomic<bool> service_stop_{false};  // the caller's stop, or every client gave up
  std::atomic<uint32_t> failed_{0};        // clients that stopped with an error
  std::mutex first_error_mu_;
  Status first_error_;
  std::atomic<uint64_t> deaths_{0};
  std::atomic<uint64_t> deaths_at_[static_cast<int>(DeathPoint::kCount)] = {};
  std::atomic<double> last_round_seconds_{0.0};  // the last closed round's, for --churn-at random
  std::atomic<int64_t> partition_from_ns_{0};    // when the partition started (steady clock); 0 = not yet
  std::atomic<size_t> live_replicas_peak_{0};
  Clock::time_point created_;
  // Written by the service thread (on_round), read after it stopped.
  std::optional<Clock::time_point> first_round_start_, last_round_end_;
  double round_seconds_sum_ = 0.0;
  uint64_t rounds_ = 0;
  double root_cpu_last_ = 0.0, root_cpu_sum_ = 0.0, root_bytes_sum_ = 0.0;
  double final_accuracy_ = 0.0;
};

Status Simulator::Impl::Init() {
  created_ = Clock::now();
  if (o_.clients == 0) return Status::InvalidArgument("--clients must be at least 1");
  if (o_.server.rounds == 0) return Status::InvalidArgument("shoal-sim needs --rounds N (N > 0)");
  if (!(o_.churn >= 0.0 && o_.churn < 1.0)) return Status::InvalidArgument("--churn must be in [0, 1)");
  if (!(o_.stragglers >= 0.0 && o_.stragglers <= 1.0)) return Status::InvalidArgument("--stragglers must be in [0, 1]");
  if ((o_.churn_at == ChurnAt::kKeys || o_.churn_at == ChurnAt::kUnmask) && !o_.server.secagg.enabled)
    return Status::InvalidArgument("--churn-at keys and unmask are points of a secure-aggregation round: add --secagg");
  if (!(o_.partition >= 0.0 && o_.partition < 1.0)) return Status::InvalidArgument("--partition must be in [0, 1)");
  if (o_.partition > 0.0 && (o_.partition_ms == 0 || o_.partition_round == 0 || o_.partition_round > o_.server.rounds))
    return Status::InvalidArgument("--partition needs --partition-ms > 0 and --partition-round in [1, --rounds]");
  if (!(o_.flapping >= 0.0 && o_.flapping <= 1.0)) return Status::InvalidArgument("--flapping must be in [0, 1]");
  if (o_.flapping > 0.0 && o_.flap_ms == 0) return Status::InvalidArgument("--flap-ms must be at least 1");
  for (double v : {o_.latency_ms, o_.latency_spread, o_.up_mbps, o_.down_mbps, o_.bandwidth_spread, o_.straggler_ms})
    if (!(v >= 0.0 && std::isfinite(v)))
      return Status::InvalidArgument("link and straggler figures must be finite and >= 0");
  if (o_.min_part < 1) return Status::InvalidArgument("--min-part must be at least 1");
  if (o_.server.optimizer.name == "demo")
    return Status::InvalidArgument(
        "shoal-sim does not run --client-optimizer demo: DeMo's momentum lives in the client between rounds, which "
        "virtual clients do not keep");
  if (o_.edges > o_.clients) return Status::InvalidArgument("--edges must be at most --clients");
  if (o_.threads == 0) o_.threads = std::max(1u, std::thread::hardware_concurrency());
  o_.threads = std::min(o_.threads, o_.clients);

  // The data, once: the held-out split as the service makes it, then the parts.
  const std::string data_dir = o_.server.data_dir.empty() ? data::DefaultDataDir() : o_.server.data_dir;
  SHOAL_ASSIGN_OR_RETURN(data::Dataset full, data::LoadDataset(o_.server.dataset, data_dir));
  // As many parts as the training split holds with min_part examples each, at most one per client.
  SHOAL_ASSIGN_OR_RETURN(data::Split split, data::TrainTestSplit(full, o_.server.test_fraction, o_.server.seed));
  const int64_t train_n = split.train.n;
  const uint32_t max_parts = static_cast<uint32_t>(std::max<int64_t>(1, train_n / o_.min_part));
  const uint32_t num_parts = std::min(o_.clients, max_parts);
  SHOAL_ASSIGN_OR_RETURN(auto parts, data::TrainingParts(split, o_.server.seed, num_parts, o_.partition_scheme,
                                                         o_.min_part));
  for (auto& part : parts) parts_.push_back(std::make_shared<const data::Dataset>(std::move(part)));
  if (num_parts < o_.clients)
    spdlog::warn("{} clients share {} parts of about {} training examples of {} (at least {} each): client i trains "
                 "on part i mod {}", o_.clients, num_parts, train_n, o_.server.dataset, o_.min_part, num_parts);
  trainer_options_.device = "cpu";
  trainer_options_.seed = o_.server.seed;
  const double per_round = std::ceil(o_.server.fraction * static_cast<double>(o_.clients));
  SHOAL_ASSIGN_OR_RETURN(
      attack_, Attack::Create(o_.attack, o_.clients, per_round, o_.server.seed,
                              [this](uint32_t client, const TaskConfig& task, std::span<const float> global,
                                     const RoundConfig& round, TrainResult* out) {
                                return TrainOnPart(trainer_options_, parts_[client % parts_.size()], task, global,
                                                   round, TrainContext{}, out);
                              }));
  if (attack_ && attack_->flips_labels()) {
    if (full.kind != data::DatasetKind::kFeatures)
      return Status::InvalidArgument("--attack label-flip needs a labelled dataset, not " + o_.server.dataset);
    for (const auto& part : parts_) flipped_parts_.push_back(FlippedLabels(*part));
  }

  // The service on the in-process network.
  net_ = transport::inproc::Network::Create(o_.server.seed);
  o_.server.listen = std::string("inproc-sim://") + kListenName;
  o_.server.max_clients = std::max(o_.server.max_clients, o_.clients);
  if (o_.edges) {  // the root takes every edge each round; each edge selects among its clients
    edge_options_ = o_.server;
    edge_options_.rounds = 0;
    edge_options_.metrics_out.clear();
    edge_options_.checkpoint_dir.clear();
    edge_options_.print_table = false;
    edge_options_.upstream = o_.server.listen;
    edge_options_.upstream_channel = [net = net_] { return net->Connect(kListenName, {}, {}); };
    o_.server.min_clients = o_.edges;
    o_.server.fraction = 1.0;
  }
  o_.server.on_round = [this](const aggregator::RoundReport& r) {
    const auto now = Clock::now();
    const double cpu = ThreadCpuSeconds();  // on the root's service thread
    if (rounds_ > 0) {
      root_cpu_sum_ += cpu - root_cpu_last_;
      root_bytes_sum_ += static_cast<double>(r.bytes_up);
    }
    root_cpu_last_ = cpu;
    if (!first_round_start_)
      first_round_start_ = now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(r.seconds));
    last_round_end_ = now;
    round_seconds_sum_ += r.seconds;
    last_round_seconds_ = r.seconds;
    if (o_.partition_ms > 0 && r.round + 1 == o_.partition_round) partition_from_ns_ = now.time_since_epoch().count();
    ++rounds_;
    final_accuracy_ = r.test_accuracy;
  };
  SHOAL_ASSIGN_OR_RETURN(auto listener, net_->Listen(kListenName));
  SHOAL_ASSIGN_OR_RETURN(service_, aggregator::Service::Create(o_.server, std::move(listener)));

  // The clients' links, drawn once from the seed.
  for (uint32_t i = 0; i < o_.clients; ++i) {
    auto s = std::make_unique<Slot>();
    s->index = i;
    s->name = "sim-" + std::to_string(i);
    s->part = i % num_parts;
    s->target = o_.edges ? EdgeName(i % o_.edges) : kListenName;
    Rng rng(o_.server.seed ^ kLinkSeedTag, i);
    const auto latency = std::chrono::microseconds(std::llround(LogNormal(rng, o_.latency_ms, o_.latency_spread) * 1000));
    s->up.latency = s->down.latency = latency;
    s->up.bytes_per_second = LogNormal(rng, o_.up_mbps, o_.bandwidth_spread) * 1e6 / 8;
    s->down.bytes_per_second = LogNormal(rng, o_.down_mbps, o_.bandwidth_spread) * 1e6 / 8;
    if (rng.UniformDouble() < o_.stragglers)
      s->up.latency += std::chrono::microseconds(std::llround(o_.straggler_ms * 1000));
    Rng faults(o_.server.seed ^ kFaultSeedTag, i);
    s->partitioned = faults.UniformDouble() < o_.partition;
    if (faults.UniformDouble() < o_.flapping) s->flap_phase = static_cast<uint32_t>(faults.Below(2 * uint64_t{o_.flap_ms}));
    MakeClient(*s);
    slots_.push_back(std::move(s));
  }
  spdlog::info("shoal-sim: {} clients on {} threads, {} data parts; service on {}", o_.clients, o_.threads, num_parts,
               o_.server.listen);
  return Status::Ok();
}

void Simulator::Impl::MakeClient(Slot& s) {
  ClientOptions co;
  co.name = s.name;
  co.connect = "inproc-sim://" + s.target;
  // Thousands of clients register through one service thread: give them time.
  co.connect_timeout_ms = 600000;
  ClientHooks hooks;
  s.link_down = std::make_shared<std::atomic<bool>>(false);
  s.up.down = s.down.down = s.link_down;
  s.die = false;
  s.doom.reset();
  s.doom_time.reset();
  hooks.at_point = [this, slot = &s](RoundPoint point, uint64_t round) { AtPoint(*slot, point, round); };
  hooks.channel = net_->Connect(s.target, s.up, s.down);
  hooks.train_inline = true;
  hooks.replicas = replicas_;
  Attack* attack = attack_ && attack_->attacker(s.index) ? attack_.get() : nullptr;
  const auto& part = attack && attack->flips_labels() ? flipped_parts_[s.part] : parts_[s.part];
  s.client = ClientFactory::Make(std::move(co), std::make_unique<SimTrainer>(trainer_options_, part, &s, attack),
                                 std::move(hooks));
  s.restart_at.reset();
}

// Churn (on the client's driver thread, inside its Poll): at its task, whether and where it
// dies this round, drawn from the seed; at each point, the death due there.
void Simulator::Impl::AtPoint(Slot& s, RoundPoint point, uint64_t round) {
  const auto now = Clock::now();
  switch (point) {
    case RoundPoint::kTask: {
      s.reached = DeathPoint::kTask;
      s.doom.reset();
      s.doom_time.reset();
      if (o_.churn <= 0.0) return;
      Rng rng(o_.server.seed ^ kChurnSeedTag, round * o_.clients + s.index);
      if (rng.UniformDouble() >= o_.churn) return;
      s.doom = o_.churn_at;
      if (s.doom == ChurnAt::kRandom) {
        const double last = last_round_seconds_.load();
        if (last > 0.0) {
          s.doom_time = now + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(rng.UniformDouble() * last));
        } else {  // the first round: no duration to draw from yet; a point, uniformly
          const std::vector<ChurnAt> points = o_.server.secagg.enabled
                                                  ? std::vector<ChurnAt>{ChurnAt::kStart, ChurnAt::kTrain, ChurnAt::kKeys,
                                                                         ChurnAt::kUpload, ChurnAt::kUnmask}
                                                  : std::vector<ChurnAt>{ChurnAt::kStart, ChurnAt::kTrain, ChurnAt::kUpload};
          s.doom = points[rng.Below(points.size())];
        }
      }
      if (s.doom == ChurnAt::kStart) s.Kill(DeathPoint::kTask);
      return;
    }
    case RoundPoint::kSharesSent:
      return Reach(s, DeathPoint::kShares, ChurnAt::kKeys, now);
    case RoundPoint::kUpdateSent:
      return Reach(s, DeathPoint::kUpdate, ChurnAt::kUpload, now);
    case RoundPoint::kUnmaskAsked:
      return Reach(s, DeathPoint::kUnmask, ChurnAt::kUnmask, now);
  }
}

// Whether a partition or its flapping holds this client's links down now.
bool Simulator::Impl::LinkDown(const Slot& s, Clock::time_point now) const {
  if (s.partitioned) {
    const int64_t from = partition_from_ns_.load();
    const auto start = Clock::time_point(Clock::duration(from));
    if (from != 0 && now >= start && now < start + milliseconds(o_.partition_ms)) return true;
  }
  if (s.flap_phase) {
    const uint64_t ms = static_cast<uint64_t>(std::chrono::duration_cast<milliseconds>(now - created_).count());
    if (((ms + *s.flap_phase) / o_.flap_ms) % 2 == 1) return true;
  }
  return false;
}

// Polls every `threads`-th client, from `thread` on, until the service is done.
void Simulator::Impl::Drive(uint32_t thread, const std::atomic<bool>& stop) {
  while (!service_done_.load()) {
    if (stop.load()) service_stop_ = true;
    const auto now = Clock::now();
    for (size_t i = thread; i < slots_.size(); i += o_.threads) {
      Slot& s = *slots_[i];
      if (!s.client) {
        if (!s.restart_at || now < *s.restart_at) continue;
        MakeClient(s);  // back after its death: a fresh connection under the same name
      }
      s.KillIfDue(now);
      if (!s.die.load()) *s.link_down = LinkDown(s, now);
      bool finished = false;
      Status st = s.die.load() ? Status::Ok() : s.client->Poll(0, &finished);
      if (s.die.exchange(false)) {  // killed: no more frames, no Bye
        s.client.reset();
        s.restart_at = now + milliseconds(o_.churn_restart_ms);
        deaths_.fetch_add(1);
        deaths_at_[static_cast<int>(s.died_at)].fetch_add(1);
        continue;
      }
      if (finished) {
        s.client.reset();
        if (!st.ok()) {
          spdlog::warn("{} stopped: {}", s.name, st.message());
          std::lock_guard<std::mutex> lock(first_error_mu_);
          if (first_error_.ok()) first_error_ = st;
          if (failed_.fetch_add(1) + 1 == o_.clients) service_stop_ = true;  // nobody is left to train
        }
      }
    }
    if (thread == 0) {
      const size_t live = replicas_->live();
      if (live > live_replicas_peak_.load()) live_replicas_peak_ = live;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
}

Status Simulator::Impl::StartEdges() {
  for (uint32_t k = 0; k < o_.edges; ++k) {
    aggregator::AggregatorOptions eo = edge_options_;
    eo.upstream_name = EdgeName(k);
    eo.min_clients = std::max(1u, std::min(edge_options_.min_clients, (o_.clients - k + o_.edges - 1) / o_.edges));
    eo.max_clients = o_.clients;
    SHOAL_ASSIGN_OR_RETURN(auto listener, net_->Listen(EdgeName(k)));
    SHOAL_ASSIGN_OR_RETURN(auto edge, aggregator::Service::Create(eo, std::move(listener)));  // joins the root
    edges_.push_back(std::move(edge));
    ++edges_running_;
    edge_threads_.emplace_back([this, e = edges_.back().get()] {
      Status st = e->Run(edges_stop_);
      if (!st.ok()) spdlog::warn("an edge aggregator stopped: {}", st.message());
      --edges_running_;
    });
  }
  spdlog::info("shoal-sim: {} edge aggregators joined the root", o_.edges);
  return Status::Ok();
}

// After the root: each edge relays its Bye to its clients and returns (5 s at most).
void Simulator::Impl::StopEdges() {
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (edges_running_.load() > 0 && Clock::now() < until) std::this_thread::sleep_for(milliseconds(10));
  edges_stop_ = true;
  for (auto& t : edge_threads_) t.join();
}

StatusOr<SimReport> Simulator::Impl::Run(const std::atomic<bool>& stop) {
  Status served;
  std::thread root([this, &served] { served = service_->Run(service_stop_); });
  if (Status started = StartEdges(); !started.ok()) {
    service_stop_ = true;
    root.join();
    StopEdges();
    return started.WithContext("starting the edge aggregators");
  }
  std::vector<std::thread> drivers;
  for (uint32_t t = 0; t < o_.threads; ++t) drivers.emplace_back([this, t, &stop] { Drive(t, stop); });
  root.join();
  StopEdges();
  service_done_ = true;
  for (auto& d : drivers) d.join();
  SimReport r;
  r.rounds = rounds_;
  if (first_round_start_) {
    r.setup_seconds = std::chrono::duration<double>(*first_round_start_ - created_).count();
    r.seconds = std::chrono::duration<double>(*last_round_end_ - *first_round_start_).count();
    r.round_seconds = round_seconds_sum_ / static_cast<double>(rounds_);
  }
  r.final_accuracy = final_accuracy_;
  r.parts = static_cast<uint32_t>(parts_.size());
  r.deaths = deaths_.load();
  for (int k = 0; k < static_cast<int>(DeathPoint::kCount); ++k) r.deaths_at[k] = deaths_at_[k].load();
  r.attackers = attack_ ? static_cast<uint32_t>(attack_->count()) : 0;
  r.frames_lost = net_->stats().frames_lost;
  r.live_replicas_peak = live_replicas_peak_.load();
  r.peak_rss_bytes = PeakRssBytes();
  if (rounds_ > 1) {
    r.root_cpu_seconds = root_cpu_sum_ / static_cast<double>(rounds_ - 1);
    r.root_bytes_in = root_bytes_sum_ / static_cast<double>(rounds_ - 1);
  }
  slots_.clear();  // clients close their channels before the services go
  edges_.clear();
  SHOAL_RETURN_IF_ERROR(served);
  if (failed_.load() == o_.clients)
    return Status::Unavailable("every client stopped with an error; the first: " + first_error_.message());
  return r;
}

StatusOr<std::unique_ptr<Simulator>> Simulator::Create(const SimOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  SHOAL_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Simulator>(new Simulator(std::move(impl)));
}

Simulator::Simulator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Simulator::~Simulator() = default;
StatusOr<SimReport> Simulator::Run(const std::atomic<bool>& stop) { return impl_->Run(stop); }

}  // namespace shoal::sim
