#include "status_page.h"

#include <CivetServer.h>

#include "metrics_endpoint.h"

namespace shoal::telemetry {

namespace {

// The page: static, self-contained. It polls /status.json and redraws; after each drawing it
// records how many rounds the charts show in <body data-rendered-rounds> (the browser test
// waits for it).
constexpr const char* kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Shoal aggregator</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .3em 0; }
#summary span { margin-right: 1.5em; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; margin: 1em 0; }
.chart { border: 1px solid #ddd; padding: .5em; }
.chart h2 { font-size: 1em; margin: 0 0 .3em 0; }
table { border-collapse: collapse; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
td:nth-child(2), th:nth-child(2) { text-align: left; }
#error { color: #b00; }
</style></head>
<body data-rendered-rounds="0">
<h1 id="title">Shoal aggregator</h1>
<div id="summary"><span id="round">round –</span><span id="clients">clients –</span><span id="updated"></span></div>
<div id="error"></div>
<div class="charts">
  <div class="chart"><h2>held-out accuracy</h2><canvas id="accuracy" width="420" height="220"></canvas></div>
  <div class="chart"><h2>held-out loss</h2><canvas id="loss" width="420" height="220"></canvas></div>
  <div class="chart"><h2>bytes per round (up: blue, down: orange)</h2><canvas id="bytes" width="420" height="220"></canvas></div>
</div>
<h2 style="font-size:1.1em">Clients</h2>
<table id="client-table"><thead><tr><th>id</th><th>name</th><th>last seen</th><th>bytes up</th>
<th>bytes down</th><th>rounds reported</th><th>in this round</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const COLORS = ["#1f77b4", "#ff7f0e"];
function fmt(v) {
  if (Math.abs(v) >= 1e9) return (v / 1e9).toFixed(2) + "G";
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (Math.abs(v) >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(3);
}
// Draws series (arrays of [x, y]) on a canvas with labelled axes.
function plot(id, series) {
  const c = document.getElementById(id), g = c.getContext("2d");
  const L = 48, R = 10, T = 10, B = 24, W = c.width - L - R, H = c.height - T - B;
  g.clearRect(0, 0, c.width, c.height);
  const pts = series.flat();
  if (pts.length === 0) return;
  let x0 = Math.min(...pts.map(p => p[0])), x1 = Math.max(...pts.map(p => p[0]));
  let y0 = Math.min(...pts.map(p => p[1])), y1 = Math.max(...pts.map(p => p[1]));
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
  const X = x => L + (x - x0) / (x1 - x0) * W, Y = y => T + H - (y - y0) / (y1 - y0) * H;
  g.strokeStyle = "#888"; g.lineWidth = 1;
  g.beginPath(); g.moveTo(L, T); g.lineTo(L, T + H); g.lineTo(L + W, T + H); g.stroke();
  g.fillStyle = "#444"; g.font = "11px sans-serif";
  g.textAlign = "right"; g.fillText(fmt(y1), L - 4, T + 9); g.fillText(fmt(y0), L - 4, T + H);
  g.textAlign = "center"; g.fillText(fmt(x0), L, T + H + 14); g.fillText(fmt(x1), L + W, T + H + 14);
  g.fillText("round", L + W / 2, T + H + 14);
  series.forEach((s, i) => {
    g.strokeStyle = COLORS[i % COLORS.length]; g.lineWidth = 2; g.beginPath();
    s.forEach((p, j) => j ? g.lineTo(X(p[0]), Y(p[1])) : g.moveTo(X(p[0]), Y(p[1])));
    g.stroke();
  });
}
function cell(row, text) { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); }
function render(s) {
  document.getElementById("title").textContent = s.title;
  document.getElementById("round").textContent = s.round_open
      ? "round " + s.round + " in progress (" + s.round_seconds.toFixed(1) + " s, " + s.updates_received + "/" +
        s.clients_selected + " updates)"
      : "waiting for round " + s.round + " (" + s.last_completed + " completed)";
  document.getElementById("clients").textContent = s.clients.length + " clients registered";
  const r = s.rounds;
  plot("accuracy", [r.map(x => [x.round, x.test_accuracy])]);
  plot("loss", [r.map(x => [x.round, x.test_loss])]);
  plot("bytes", [r.map(x => [x.round, x.bytes_up]), r.map(x => [x.round, x.bytes_down])]);
  const body = document.querySelector("#client-table tbody");
  body.replaceChildren();
  for (const c of s.clients) {
    const row = document.createElement("tr");
    row.className = "client";
    [c.id, c.name, c.seconds_since_seen.toFixed(1) + " s ago", fmt(c.bytes_up), fmt(c.bytes_down), c.rounds_reported,
     c.selected ? "training" : ""].forEach(v => cell(row, v));
    body.appendChild(row);
  }
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  document.body.dataset.renderedRounds = String(r.length);
}
let failures = 0;
async function poll() {
  try {
    const res = await fetch("/status.json", {cache: "no-store"});
    render(await res.json());
    failures = 0;
    document.getElementById("error").textContent = "";
  } catch (e) {
    // One miss is a blip; say so from the second in a row.
    if (++failures >= 2) document.getElementById("error").textContent = "cannot reach the aggregator: " + e;
  }
  setTimeout(poll, 1000);
}
poll();
</script></body></html>
)HTML";

}  // namespace

class StatusPage::Handler : public CivetHandler {
 public:
  Handler(const StatusPage* page, bool json) : page_(page), json_(json) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    const std::string body = json_ ? page_->Snapshot().dump() : std::string(kPage);
    mg_printf(conn,
              "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
              "Connection: close\r\n\r\n",
              json_ ? "application/json" : "text/html; charset=utf-8", body.size());
    mg_write(conn, body.data(), body.size());
    return true;
  }

 private:
  const StatusPage* page_;
  bool json_;
};

StatusOr<std::unique_ptr<StatusPage>> StatusPage::Start(const std::string& listen, const std::string& title) {
  SHOAL_ASSIGN_OR_RETURN(const std::string address, ParseListenAddress(listen, "--status-listen"));
  std::unique_ptr<StatusPage> p(new StatusPage());
  p->title_ = title;
  p->page_ = std::make_unique<Handler>(p.get(), false);
  p->json_ = std::make_unique<Handler>(p.get(), true);
  try {
    static const CivetCallbacks callbacks = [] {
      CivetCallbacks c;
      c.begin_request = [](mg_connection* conn) { return AnswerUnlessServed(conn, {"/", "/status.json"}); };
      return c;
    }();
    p->server_ = std::make_unique<CivetServer>(
        std::vector<std::string>{"listening_ports", address, "num_threads", "2", "request_timeout_ms", "10000"},
        &callbacks);
  } catch (const std::exception& ex) {
    return Status::Unavailable("--status-listen " + listen + ": cannot listen there (" + ex.what() + ")");
  }
  p->server_->addHandler("/status.json", p->json_.get());
  p->server_->addHandler("/$", p->page_.get());  // exactly "/"
  p->address_ = BoundAddress(address, p->server_->getListeningPorts());
  return p;
}

StatusPage::~StatusPage() {
  if (server_) server_->close();
}

void StatusPage::OnRound(const RoundReport& r) {
  nlohmann::json line = {{"round", r.round},
                         {"test_accuracy", r.test_accuracy},
                         {"test_loss", r.test_loss},
                         {"bytes_up", r.bytes_up},
                         {"bytes_down", r.bytes_down},
                         {"seconds", r.seconds},
                         {"clients_reported", r.clients_reported},
                         {"clients_selected", r.clients_selected}};
  std::lock_guard<std::mutex> lock(mu_);
  rounds_.push_back(std::move(line));
  if (rounds_.size() > kMaxRounds) rounds_.erase(rounds_.begin(), rounds_.begin() + (rounds_.size() - kMaxRounds));
}

void StatusPage::OnStatus(const LiveStatus& s) {
  std::lock_guard<std::mutex> lock(mu_);
  live_ = s;
}

nlohmann::json StatusPage::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json clients = nlohmann::json::array();
  for (const ClientStatus& c : live_.clients)
    clients.push_back({{"id", c.id},
                       {"name", c.name},
                       {"seconds_since_seen", c.seconds_since_seen},
                       {"bytes_up", c.bytes_up},
                       {"bytes_down", c.bytes_down},
                       {"rounds_reported", c.rounds_reported},
                       {"selected", c.selected}});
  return {{"title", title_},
          {"round", live_.round},
          {"round_open", live_.round_open},
          {"round_seconds", live_.round_seconds},
          {"clients_selected", live_.clients_selected},
          {"updates_received", live_.updates_received},
          {"last_completed", live_.last_completed},
          {"clients", std::move(clients)},
          {"rounds", rounds_}};
}

}  // namespace shoal::telemetry
