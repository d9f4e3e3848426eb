// shoal-aggregator's live status page (--status-listen HOST:PORT), served by civetweb:
//   GET /             one static page (HTML, CSS and JavaScript inline: no external resource,
//                     no CDN) that fetches /status.json every second and draws the round in
//                     progress, the clients (last seen, bytes, rounds reported) and the curves
//                     of accuracy, loss and bytes per round on <canvas> elements
//   GET /status.json  the live state and the history of rounds, fed by the service's typed
//                     observers (LiveStatus, RoundReport) and read under one lock
// Loopback by default, like the metrics endpoint: the page names every client.
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shoal/server.h"
#include "shoal/status.h"

class CivetServer;

namespace shoal::telemetry {

class StatusPage {
 public:
  // Binds `listen` (ParseListenAddress: HOST:PORT or PORT) and serves until destroyed.
  // Unavailable when the address cannot be bound; InvalidArgument for a malformed one.
  static StatusOr<std::unique_ptr<StatusPage>> Start(const std::string& listen, const std::string& title);
  ~StatusPage();
  const std::string& address() const { return address_; }  // HOST:PORT bound

  void OnRound(const RoundReport& r);  // appended to the history (the last kMaxRounds)
  void OnStatus(const LiveStatus& s);
  // What /status.json returns.
  nlohmann::json Snapshot() const;

  static constexpr size_t kMaxRounds = 10000;

 private:
  StatusPage() = default;
  class Handler;
  std::string title_;
  mutable std::mutex mu_;
  LiveStatus live_;
  std::vector<nlohmann::json> rounds_;
  std::unique_ptr<Handler> page_, json_;
  std::unique_ptr<CivetServer> server_;  // last: stopped first, before the handlers go
  std::string address_;
};

}  // namespace shoal::telemetry
