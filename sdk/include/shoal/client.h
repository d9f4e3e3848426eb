// shoal::Client: joins an aggregator, trains each round it is selected for with a Trainer,
// and sends back the update, until the aggregator says Bye. Reconnects with backoff when
// the aggregator restarts; heartbeats keep it registered during long local training.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shoal/status.h"
#include "shoal/trainer.h"

namespace shoal {

// What the client reports to the application while it runs (for progress bars and logs).
struct ClientEvent {
  enum class Kind {
    kConnected,     // Welcome received; `message` describes the task
    kRoundStarted,  // a RoundTask arrived
    kProgress,      // local training progress in `progress`
    kRoundDone,     // update sent and acknowledged
    kReconnecting,  // lost the aggregator; retrying
    kFinished,      // Bye received; `message` is the reason
  };
  explicit ClientEvent(Kind k) : kind(k) {}
  Kind kind;
  uint64_t round = 0;
  float progress = 0.0f;
  double train_loss = 0.0;
  uint64_t bytes_sent = 0;      // cumulative bytes on the wire
  uint64_t bytes_received = 0;  // cumulative bytes on the wire
  double seconds = 0.0;         // for kRoundDone: time from task to acknowledgement
  std::string message;
};

// What this client requires of the aggregator's task, whatever the aggregator says
// (docs/SECURITY.md, "What a client enforces"). A task below it is refused at Welcome with an
// error naming the setting, and Run() returns FailedPrecondition: the client never trains for
// it. The secure-aggregation fields also bound each round's Setup (a round below them is
// aborted on this client, which then reveals nothing).
struct ClientPrivacyPolicy {
  bool require_secagg = false;        // refuse a task without secure aggregation
  // Distributed DP: refuse a noise multiplier z below this (> 0 also requires DP and secure
  // aggregation: this client adds its own share of the noise). Default: 0 (any).
  double min_noise_multiplier = 0.0;
  double max_clip = 0.0;              // refuse a DP clip C above this; 0 = any
  uint32_t min_neighbours = 1;        // secure aggregation: the fewest neighbours k a round may give
  uint32_t min_threshold = 1;         // secure aggregation: the fewest shares t that reconstruct a secret
  uint32_t min_roster = 3;            // secure aggregation: the fewest clients in a round's roster
  // Secure aggregation: the share of the roster this client assumes colludes with the
  // aggregator; the consistency round then needs floor((n + floor(f n)) / 2) + 1 signatures.
  double colluding_fraction = 0.0;
  // Secure aggregation: the .pub files (a file, or a directory of them: the same form as an
  // allow-list) of the clients this client trusts; every round's roster must consist of them.
  // Without it, a malicious aggregator can fill a roster with identities of its own
  // (docs/SECURITY.md). Default: empty (any identity).
  std::string trusted_roster;
};

struct ClientOptions {
  std::string connect = "tcp://127.0.0.1:7070";  // aggregator endpoint
  std::string name;                  // stable client name; Default: "client-<pid>"
  uint32_t connect_timeout_ms = 30000;    // give up when no Welcome arrives within this
  uint32_t reconnect_timeout_ms = 120000; // after losing the aggregator, keep trying this long
  uint64_t max_frame_bytes = (uint64_t{64} << 20) + (uint64_t{256} << 10);  // largest frame accepted
  // CurveZMQ: this client's key file (PREFIX.key from shoal-keygen, mode 0600) and the
  // aggregator's public key (40 Z85 characters, or its PREFIX.pub file), which pins the
  // aggregator. Both or neither. Without them only a loopback `connect` is allowed, unless
  // `insecure` says otherwise.
  std::string secret_key_file;
  std::string server_key;
  bool insecure = false;  // connect to a non-loopback aggregator without transport security
  // Give up (Run returns PermissionDenied or Unavailable) after this many failed handshakes
  // in a row: a refused key or a wrong server key never fixes itself. Default: 3.
  uint32_t max_handshake_failures = 3;
  ClientPrivacyPolicy privacy;  // what the task must meet (see above); Default: no requirement
  std::function<void(const ClientEvent&)> on_event;  // optional; called on the Run() thread
};

// What `options` alone decide, without the network or any data: the security flags' rules
// (keys both or neither; no plain connection off loopback without `insecure`) and the
// timeouts, the privacy policy's ranges. The same errors Run() would give first (InvalidArgument); a program checks them
// before it loads data or probes a device for its trainer.
Status ValidateClientOptions(const ClientOptions& options);

class Client {
 public:
  // Takes ownership of the trainer. Does not connect yet.
  Client(ClientOptions options, std::unique_ptr<Trainer> trainer);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Connects, joins and trains until the aggregator says Bye (returns OK), Cancel() is called
  // (Cancelled), the aggregator cannot be reached (Unavailable, with a message that says
  // what to check), or the handshake keeps failing (PermissionDenied for a refused key,
  // Unavailable for a wrong server key). Call at most once.
  Status Run();
  // Instead of Run(), for an application with its own event loop: does the client's work
  // (connecting, heartbeats, receiving, sending) for up to `timeout_ms` and returns. While the
  // run goes on it returns OK with *finished = false; once it is over, *finished = true and
  // the status is what Run() would have returned (and stays so on later calls). Local
  // training still runs on the client's worker thread, so a Poll never blocks on it. Call
  // from one thread at a time; do not mix with Run().
  Status Poll(uint32_t timeout_ms, bool* finished);
  // Thread-safe; makes Run() or Poll() return promptly (cancels local training too).
  void Cancel();

  struct Stats {
    uint64_t rounds_trained = 0;
    uint64_t bytes_sent = 0;
    uint64_t bytes_received = 0;
    uint64_t reconnects = 0;
    uint64_t errors_received = 0;
    uint64_t resyncs = 0;  // full-model resyncs this client asked for
    // Rounds this client took back because the aggregator resumed at an earlier one, and
    // updates left out of their round whose mass went back into the error-feedback residual.
    uint64_t rounds_rolled_back = 0;
    uint64_t updates_returned = 0;
  };
  Stats stats() const;

 private:
  class Impl;
  friend class ClientFactory;  // the simulator's way in (internal: sdk/src/runtime/client/hooks.h)
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal
