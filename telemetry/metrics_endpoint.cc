#include "metrics_endpoint.h"

#include <CivetServer.h>
#include <prometheus/exposer.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
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
    // pid being 1): starttime is field 22, in clock ticks.
    std::ifstream stat("/proc/self/stat");
    std::string line;
    std::getline(stat, line);
    std::vector<std::string> fields;
    if (const size_t paren = line.rfind(')'); paren != std::string::npos) {
      std::istringstream rest(line.substr(paren + 1));
      for (std::string v; rest >> v;) fields.push_back(v);
    }
    auto field = [&](size_t k) { return k - 3 < fields.size() ? std::strtod(fields[k - 3].c_str(), nullptr) : 0.0; };
    // CPU time from getrusage, in microseconds: /proc's clock ticks (10 ms) read 0 for a
    // process that has worked less than one tick, and a scrape early in a run is such a case.
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
    out.Counter("process_cpu_seconds_total", "user and system CPU time of this process")
        .Value(seconds(usage.ru_utime) + seconds(usage.ru_stime));
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

int AnswerUnlessServed(mg_connection* conn, std::initializer_list<const char*> served) {
  const mg_request_info* req = mg_get_request_info(conn);
  const std::string method = req && req->request_method ? req->request_method : "";
  const std::string path = req && req->local_uri ? req->local_uri : "";
  const bool known = std::any_of(served.begin(), served.end(), [&](const char* p) { return path == p; });
  if (known && method == "GET") return 0;
  const int code = known ? 405 : 404;
  std::string body = known ? "only GET is served here\n" : "not found; served here:";
  if (!known)
    for (const char* p : served) body += std::string(" ") + p;
  if (!known) body += "\n";
  mg_printf(conn, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
            code, known ? "Method Not Allowed" : "Not Found", body.size(), known ? "Allow: GET\r\n" : "");
  mg_write(conn, body.data(), body.size());
  return code;
}

StatusOr<std::string> ParseListenAddress(const std::string& listen, const std::string& flag) {
  const size_t colon = listen.rfind(':');
  const std::string host = colon == std::string::npos ? "127.0.0.1" : listen.substr(0, colon);
  const std::string port_text = colon == std::string::npos ? listen : listen.substr(colon + 1);
  int port = -1;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 0 || port > 65535 || host.empty())
    return Status::InvalidArgument(flag + " " + listen + ": expected HOST:PORT or PORT (e.g. 127.0.0.1:9464)");
  return host + ":" + std::to_string(port);
}

std::string BoundAddress(const std::string& address, const std::vector<int>& ports) {
  return ports.empty() ? address : address.substr(0, address.rfind(':') + 1) + std::to_string(ports.front());
}

StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& listen, const std::string& program,
                                                                  std::shared_ptr<prometheus::Collectable> source) {
  SHOAL_ASSIGN_OR_RETURN(const std::string address, ParseListenAddress(listen, "--metrics-listen"));
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  try {
    static const CivetCallbacks callbacks = [] {
      CivetCallbacks c;
      c.begin_request = [](mg_connection* conn) { return AnswerUnlessServed(conn, {"/metrics"}); };
      return c;
    }();
    e->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", address, "num_threads", "1"}, &callbacks);
  } catch (const std::exception& ex) {
    return Status::Unavailable("--metrics-listen " + listen + ": cannot listen there (" + ex.what() + ")");
  }
  e->address_ = BoundAddress(address, e->exposer_->GetListeningPorts());
  e->collectables_ = {std::move(source), std::make_shared<ProcessFacts>(program)};
  for (const auto& c : e->collectables_) e->exposer_->RegisterCollectable(c);
  return e;
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace shoal::telemetry
