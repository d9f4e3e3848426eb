#include "metrics_endpoint.h"

#include <prometheus/exposer.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "shoal/config.h"

namespace shoal::telemetry {

namespace {

prometheus::MetricFamily Family(const std::string& name, const std::string& help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

// The standard process metrics, read from /proc at each scrape (Linux).
class ProcessFacts : public prometheus::Collectable {
 public:
  explicit ProcessFacts(std::string program) : program_(std::move(program)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    FamilyList out;
    out.Gauge("shoal_build_info", "Shoal's version and this program, as labels (value 1)")
        .Value(1, {{"version", SHOAL_VERSION_STRING}, {"program", program_}});
    const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
    // /proc/self/stat: after the parenthesised command name come fields 3, 4, ... (1-based,
    // pid being 1): utime is field 14, stime 15, starttime 22, all in clock ticks.
    std::ifstream stat("/proc/self/stat");
    std::string line;
    std::getline(stat, line);
    std::vector<std::string> fields;
    if (const size_t paren = line.rfind(')'); paren != std::string::npos) {
      std::istringstream rest(line.substr(paren + 1));
      for (std::string v; rest >> v;) fields.push_back(v);
    }
    auto field = [&](size_t k) { return k - 3 < fields.size() ? std::strtod(fields[k - 3].c_str(), nullptr) : 0.0; };
    out.Counter("process_cpu_seconds_total", "user and system CPU time of this process")
        .Value((field(14) + field(15)) / tick);
    double boot = 0;
    std::ifstream proc_stat("/proc/stat");
    for (std::string key; proc_stat >> key;)
      if (key == "btime") {
        proc_stat >> boot;
        break;
      }
    out.Gauge("process_start_time_seconds", "start of this process, seconds since the epoch")
        .Value(boot + field(22) / tick);
    std::ifstream statm("/proc/self/statm");
    double pages_virtual = 0, pages_resident = 0;
    statm >> pages_virtual >> pages_resident;
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    out.Gauge("process_resident_memory_bytes", "resident set size").Value(pages_resident * page);
    out.Gauge("process_virtual_memory_bytes", "virtual memory size").Value(pages_virtual * page);
    std::error_code ec;
    double fds = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::end(it);
         it.increment(ec))
      ++fds;
    out.Gauge("process_open_fds", "open file descriptors").Value(fds);
    return out.Take();
  }

 private:
  std::string program_;
};

}  // namespace

FamilyList& FamilyList::Counter(const std::string& name, const std::string& help) {
  families_.push_back(Family(name, help, prometheus::MetricType::Counter));
  return *this;
}
FamilyList& FamilyList::Gauge(const std::string& name, const std::string& help) {
  families_.push_back(Family(name, help, prometheus::MetricType::Gauge));
  return *this;
}
FamilyList& FamilyList::Histogram(const std::string& name, const std::string& help) {
  families_.push_back(Family(name, help, prometheus::MetricType::Histogram));
  return *this;
}
FamilyList& FamilyList::Value(double value, Labels labels) {
  prometheus::ClientMetric m;
  if (families_.back().type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  return Sample(std::move(m), std::move(labels));
}
FamilyList& FamilyList::Sample(prometheus::ClientMetric metric, Labels labels) {
  metric.label = std::move(labels);
  families_.back().metric.push_back(std::move(metric));
  return *this;
}

StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& listen, const std::string& program,
                                                                  std::shared_ptr<prometheus::Collectable> source) {
  const size_t colon = listen.rfind(':');
  const std::string host = colon == std::string::npos ? "127.0.0.1" : listen.substr(0, colon);
  const std::string port_text = colon == std::string::npos ? listen : listen.substr(colon + 1);
  int port = -1;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 0 || port > 65535 || host.empty())
    return Status::InvalidArgument("--metrics-listen " + listen + ": expected HOST:PORT or PORT (e.g. 127.0.0.1:9464)");
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  try {
    e->exposer_ = std::make_unique<prometheus::Exposer>(host + ":" + std::to_string(port), 1);
  } catch (const std::exception& ex) {
    return Status::Unavailable("--metrics-listen " + listen + ": cannot listen there (" + ex.what() + ")");
  }
  const std::vector<int> ports = e->exposer_->GetListeningPorts();
  e->address_ = host + ":" + std::to_string(ports.empty() ? port : ports.front());
  e->collectables_ = {std::move(source), std::make_shared<ProcessFacts>(program)};
  for (const auto& c : e->collectables_) e->exposer_->RegisterCollectable(c);
  return e;
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace shoal::telemetry
