/* shoal.h: the stable C ABI of libshoal (C99; usable from C++, and from any language with a
 * C FFI: JNI, Swift, C#, Python's ctypes).
 *
 * An application joins a federation with its own training code by filling a shoal_trainer
 * (a versioned struct of callbacks), or trains Shoal's built-in model on a dataset, and runs
 * the client blocking (shoal_client_run) or steps it from its own event loop
 * (shoal_client_step). The same trainer trains in a serverless swarm as a peer
 * (shoal_peer_run). The aggregator itself runs inside an application too (shoal_server_*),
 * scoring each round's model with the application's own evaluator. See examples/c/ and
 * examples/python/.
 *
 * ABI history: 1: the client, trainer and datasets. 2: peers (shoal_peer_*), and
 * shoal_round.keep_optimizer_state. 3: the aggregator as a library (shoal_server_*,
 * shoal_evaluator, shoal_eval_metric). Fields added since at the end of a struct (compatible,
 * read when struct_size covers them): shoal_peer_options.overlap; shoal_builtin_options.ranks and
 * bucket_bytes; shoal_client_options' privacy policy (require_secagg ... trusted_roster).
 *
 * Conventions, for every function below:
 * - Fallible functions return a shoal_status (SHOAL_OK = 0). No C++ exception ever crosses
 *   this boundary. On failure the message is available from shoal_last_error() on the same
 *   thread, and, for calls on a client, from shoal_client_last_error().
 * - Misuse (a NULL handle or pointer, a struct_size or version this library does not know)
 *   returns SHOAL_INVALID_ARGUMENT with a message; it never crashes.
 * - Strings passed in are copied before the call returns; the caller keeps ownership.
 *   Strings and arrays returned are owned by the library; how long they stay valid is said
 *   at each function.
 * - Structs that cross the boundary start with `struct_size` (set it with the matching
 *   *_init function, passing sizeof the struct, or set it to sizeof) or `version`, so that
 *   fields can be added at the end in later versions without breaking applications built
 *   against this header: a library reads and writes only the fields the caller's
 *   struct_size covers.
 * - Symbols: only shoal_* names are exported from the shared library. SHOAL_ABI_VERSION
 *   changes whenever a function or a struct layout changes incompatibly.
 */
#ifndef SHOAL_SHOAL_H_
#define SHOAL_SHOAL_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define SHOAL_EXPORT __attribute__((visibility("default")))
#else
#define SHOAL_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes. Compare with shoal_abi_version() at run time. */
#define SHOAL_ABI_VERSION 3

/* ---- status, version, errors, logging ------------------------------------------------ */

typedef enum shoal_status {
  SHOAL_OK = 0,
  SHOAL_INVALID_ARGUMENT = 1,   /* bad option, NULL handle, unknown struct size or version */
  SHOAL_NOT_FOUND = 2,          /* a missing file, an unknown dataset */
  SHOAL_IO_ERROR = 3,           /* read/write/socket failure */
  SHOAL_CORRUPTION = 4,         /* checksum or format mismatch in stored data */
  SHOAL_PROTOCOL = 5,           /* the other side violated the wire protocol */
  SHOAL_UNAVAILABLE = 6,        /* the aggregator is unreachable or went away */
  SHOAL_CANCELLED = 7,          /* shoal_client_cancel() was called */
  SHOAL_FAILED_PRECONDITION = 8,/* a call out of order (e.g. shoal_client_run without a trainer) */
  SHOAL_INTERNAL = 9,           /* a bug in Shoal, or a trainer callback that failed */
  SHOAL_PERMISSION_DENIED = 10  /* the aggregator refused this client's key */
} shoal_status;

/* "0.1.0". Static storage. Thread-safe. */
SHOAL_EXPORT const char* shoal_version(void);
/* SHOAL_ABI_VERSION of the library actually loaded. Thread-safe. */
SHOAL_EXPORT int shoal_abi_version(void);
/* "OK", "InvalidArgument", ... for a status; "Unknown" otherwise. Static storage. Thread-safe. */
SHOAL_EXPORT const char* shoal_status_name(int status);
/* The message of the last call that failed on this thread ("" if none). Valid until the next
 * failing call on this thread. Thread-safe (thread-local). */
SHOAL_EXPORT const char* shoal_last_error(void);

/* Log levels (spdlog's). */
enum {
  SHOAL_LOG_TRACE = 0,
  SHOAL_LOG_DEBUG = 1,
  SHOAL_LOG_INFO = 2,
  SHOAL_LOG_WARN = 3,
  SHOAL_LOG_ERROR = 4,
  SHOAL_LOG_CRITICAL = 5,
  SHOAL_LOG_OFF = 6
};
/* Receives one log line (without a newline) at `level`. Called from any of Shoal's threads,
 * one call at a time; `message` is valid only during the call. Must not call back into
 * shoal_set_log_callback. */
typedef void (*shoal_log_fn)(void* user, int level, const char* message);
/* Routes Shoal's log lines at or above `min_level` to `fn` (process-wide). fn = NULL restores
 * logging to stderr at `min_level`. Returns SHOAL_INVALID_ARGUMENT for a level outside
 * SHOAL_LOG_TRACE..SHOAL_LOG_OFF.
 * Thread-safe, also while clients run: once it returns, the previous fn is never called
 * again (its `user` may be freed). Shoal installs its logger as spdlog's default logger at
 * the first call of this function, shoal_client_create or shoal_dataset_load; a C++ program
 * that also uses spdlog should make that call before its own threads log. */
SHOAL_EXPORT shoal_status shoal_set_log_callback(shoal_log_fn fn, void* user, int min_level);

/* ---- what the aggregator asks for --------------------------------------------------- */

/* One tensor of the model's parameter layout. */
typedef struct shoal_tensor {
  const char* name;      /* e.g. "fc0.weight" */
  size_t offset;         /* in floats, from the start of the flat parameter vector */
  size_t size;           /* number of floats */
  size_t rank;           /* number of dimensions */
  const int64_t* shape;  /* rank values */
} shoal_tensor;

/* The task the aggregator sends at Welcome. Passed to configure(); every pointer in it is
 * valid only during that call (copy what you keep). Check struct_size before reading a field
 * added after ABI 1 (none yet). */
typedef struct shoal_task {
  size_t struct_size;
  const char* model;            /* the aggregator's model spec, e.g. "linear", "mlp:64" */
  const char* dataset;          /* the dataset the aggregator evaluates on, e.g. "digits" */
  size_t num_params;            /* floats in the parameter vector (sum of the tensors' sizes) */
  size_t num_tensors;
  const shoal_tensor* tensors;  /* the layout, in order */
  const char* optimizer;        /* "sgd", "adamw" or "demo": what the built-in trainer would use */
  float learning_rate;
  float momentum;
  float weight_decay;
  uint32_t local_epochs;        /* passes over local data per round (when local_steps == 0) */
  uint32_t local_steps;         /* if > 0: exactly this many minibatch steps per round */
  uint32_t batch_size;
  uint64_t seed;                /* the run's seed (data split, partitions) */
  double test_fraction;         /* the aggregator's held-out share (see shoal_dataset_load) */
} shoal_task;

/* One round's settings, passed to train(). */
typedef struct shoal_round {
  size_t struct_size;
  uint64_t round;        /* 1, 2, ... */
  float learning_rate;
  uint32_t local_epochs;
  uint32_t local_steps;  /* if > 0: exactly this many minibatch steps */
  float prox_mu;         /* FedProx coefficient (0 = none) */
  /* ABI 2 (check struct_size): nonzero when the optimizer's state (momentum, Adam moments)
   * should carry over from the previous train() call, as peers ask; 0 (federated rounds):
   * start it fresh. */
  uint32_t keep_optimizer_state;
} shoal_round;

/* Handed to train() for the duration of the call. */
typedef struct shoal_train_context shoal_train_context;
/* Nonzero once the client is being cancelled or the round abandoned: return promptly
 * (any return value; SHOAL_CANCELLED is conventional). Callable from the training thread. */
SHOAL_EXPORT int shoal_train_cancelled(const shoal_train_context* context);
/* Reports progress in [0, 1] (clamped; shown in heartbeats and progress events). */
SHOAL_EXPORT void shoal_train_progress(shoal_train_context* context, float fraction);

/* ---- the application's trainer ----------------------------------------------------- */

#define SHOAL_TRAINER_VERSION 1

/* Callbacks an application implements to train with its own code. Every callback receives
 * `user`, returns 0 on success, and on failure returns nonzero (a shoal_status, or any other
 * nonzero value, read as SHOAL_INTERNAL) after writing a NUL-terminated reason into `error`
 * (at most error_size bytes, always > 0).
 *
 * Threads: configure() runs on the thread in shoal_client_run/step; set_parameters, train,
 * get_parameters and evaluate run on the client's training thread: one thread for the
 * client's lifetime, started at the first round and joined by shoal_client_destroy (attach
 * it to a JVM once, keep a CUDA device current on it). In a peer, every callback runs on the
 * thread in shoal_peer_run. Never two callbacks at once.
 *
 * One round: if evaluate is given, set_parameters(global) and evaluate() (federated
 * evaluation of the received model); then set_parameters(global), train(round),
 * get_parameters(local); the update sent is local - global.
 *
 * Cancellation reaches train() through shoal_train_cancelled(); the other callbacks are not
 * interrupted. While a round is abandoned (cancel, a newer round, a lost aggregator), the
 * thread in shoal_client_run/step waits for the callback in progress to return. */
typedef struct shoal_trainer {
  uint32_t version;          /* SHOAL_TRAINER_VERSION */
  void* user;                /* passed to every callback */
  const char* name;          /* shown to the aggregator; may be NULL (copied) */
  uint64_t num_examples;     /* local training examples (informational, sent at Hello) */

  /* Required. The task (layout, seed, batch size, ...). Fail it (e.g. SHOAL_INVALID_ARGUMENT)
   * if this trainer cannot train that model: the run then ends with that status and reason. */
  int (*configure)(void* user, const shoal_task* task, char* error, size_t error_size);
  /* Required. Load `count` floats (the whole model, in layout order) into the model. */
  int (*set_parameters)(void* user, const float* params, size_t count, char* error, size_t error_size);
  /* Required. Write the model's `count` floats, in layout order, into `params`. */
  int (*get_parameters)(void* user, float* params, size_t count, char* error, size_t error_size);
  /* Required. Train from the parameters last set; set *num_examples (the update's weight; 0
   * is read as 1) and *train_loss (mean loss, or NaN if unknown). A failed round is skipped:
   * the aggregator times this client out for it, and the client keeps serving. */
  int (*train)(void* user, const shoal_round* round, shoal_train_context* context, uint64_t* num_examples,
               double* train_loss, char* error, size_t error_size);
  /* Optional (NULL). Evaluate the parameters last set on local data: federated evaluation of
   * each round's global model (the aggregator reports client_eval_loss/_accuracy). */
  int (*evaluate)(void* user, double* loss, double* accuracy, uint64_t* num_examples, char* error,
                  size_t error_size);
  /* Optional (NULL). Called once when the client no longer needs `user`: when the client is
   * destroyed, or when another trainer replaces this one. */
  void (*destroy)(void* user);
} shoal_trainer;

/* ---- the client -------------------------------------------------------------------- */

typedef struct shoal_client shoal_client;

enum {
  SHOAL_EVENT_CONNECTED = 0,     /* joined; `message` describes the task */
  SHOAL_EVENT_ROUND_STARTED = 1,
  SHOAL_EVENT_PROGRESS = 2,      /* `progress` of local training */
  SHOAL_EVENT_ROUND_DONE = 3,    /* update sent and acknowledged; `train_loss`, `seconds` */
  SHOAL_EVENT_RECONNECTING = 4,  /* lost the aggregator; retrying */
  SHOAL_EVENT_FINISHED = 5       /* the aggregator said Bye; `message` is its reason */
};
typedef struct shoal_event {
  size_t struct_size;
  int kind;                 /* SHOAL_EVENT_* */
  uint64_t round;
  float progress;
  double train_loss;
  uint64_t bytes_sent;      /* cumulative bytes on the wire */
  uint64_t bytes_received;
  double seconds;
  const char* message;      /* valid during the call */
} shoal_event;
/* Called on the thread in shoal_client_run/step. */
typedef void (*shoal_event_fn)(void* user, const shoal_event* event);

typedef struct shoal_client_options {
  size_t struct_size;               /* sizeof(shoal_client_options); set by shoal_client_options_init */
  const char* connect;              /* aggregator endpoint. Default: "tcp://127.0.0.1:7070" */
  const char* name;                 /* stable client name. Default (NULL): "client-<pid>" */
  const char* secret_key_file;      /* CurveZMQ: this client's PREFIX.key (shoal-keygen). Default: NULL */
  const char* server_key;           /* the aggregator's public key (Z85) or its .pub file; pins it. Default: NULL */
  int insecure;                     /* nonzero: allow a non-loopback aggregator without keys. Default: 0 */
  uint32_t connect_timeout_ms;      /* give up when nothing answers this long. Default: 30000 */
  uint32_t reconnect_timeout_ms;    /* after losing the aggregator, keep trying this long. Default: 120000 */
  uint32_t max_handshake_failures;  /* stop after this many failed handshakes in a row. Default: 3 */
  shoal_event_fn on_event;          /* optional progress/round events. Default: NULL */
  void* event_user;                 /* passed to on_event */
  /* Privacy policy (read when struct_size covers trusted_roster): what this client requires of
   * the aggregator's task, whatever the aggregator says; a task below it is refused at Welcome
   * and shoal_client_run returns SHOAL_FAILED_PRECONDITION naming the setting
   * (docs/SECURITY.md, "What a client enforces"). */
  int require_secagg;               /* nonzero: refuse a task without secure aggregation. Default: 0 */
  double min_noise_multiplier;      /* refuse distributed DP noise z below this (> 0 requires DP). Default: 0 */
  double max_clip;                  /* refuse a DP clip C above this (> 0 requires DP); 0 = any. Default: 0 */
  uint32_t min_neighbours;          /* secure aggregation: fewest neighbours k per round. Default: 1 */
  uint32_t min_threshold;           /* secure aggregation: lowest threshold t. Default: 1 */
  uint32_t min_roster;              /* secure aggregation: fewest clients in a roster. Default: 3 */
  double colluding_fraction;        /* secure aggregation: share of the roster assumed colluding. Default: 0 */
  const char* trusted_roster;       /* secure aggregation: .pub FILE or DIR of trusted clients. Default: NULL */
} shoal_client_options;

/* Fills the struct_size bytes at *options with the defaults above and sets struct_size.
 * Pass sizeof(shoal_client_options). SHOAL_INVALID_ARGUMENT for NULL or a size this library
 * does not know (nothing is written then). */
SHOAL_EXPORT shoal_status shoal_client_options_init(shoal_client_options* options, size_t struct_size);

/* Creates a client (it does not connect yet) into *client; free it with shoal_client_destroy.
 * Options are copied. */
SHOAL_EXPORT shoal_status shoal_client_create(const shoal_client_options* options, shoal_client** client);

/* Registers the application's trainer (the struct is copied). Replaces an earlier trainer
 * (calling its destroy). SHOAL_FAILED_PRECONDITION once the client has started. */
SHOAL_EXPORT shoal_status shoal_client_set_trainer(shoal_client* client, const shoal_trainer* trainer);

/* Shoal's built-in trainer instead: its own model (whatever the aggregator asks) on a part of
 * a dataset. */
typedef struct shoal_builtin_options {
  size_t struct_size;            /* set by shoal_builtin_options_init */
  const char* dataset;           /* "digits", "csv:PATH", "idx:IMAGES,LABELS". Default: "digits" */
  const char* data_dir;          /* dataset cache. Default (NULL): $SHOAL_DATA_DIR or ~/.cache/shoal */
  uint32_t partition_index;      /* this client's part, 0-based. Default: 0 */
  uint32_t partition_count;      /* number of parts. Default: 1 */
  const char* partition_scheme;  /* "iid" or "dirichlet:ALPHA". Default: "iid" */
  const char* device;            /* "auto", "cpu", "cuda[:N]". Default: "auto" */
  const char* precision;         /* "fp32", "tf32", "bf16", "fp16". Default: "fp32" */
  uint32_t ranks;                /* data-parallel ranks on `device` (threads on "cpu", one GPU each on "cuda",
                                    NCCL): each step's minibatch split among them, their gradients all-reduced;
                                    one update a round (shoal/trainer.h, BuiltinTrainerOptions::ranks). >= 1.
                                    Default: 1 */
  size_t bucket_bytes;           /* with several ranks: the gradient all-reduced in buckets of this many bytes
                                    during the backward pass; 0 = all of it after. Default: 25 MiB */
} shoal_builtin_options;
/* As shoal_client_options_init: pass sizeof(shoal_builtin_options). */
SHOAL_EXPORT shoal_status shoal_builtin_options_init(shoal_builtin_options* options, size_t struct_size);
/* Loads the dataset now (so a missing file fails here, not mid-run). Replaces an earlier
 * trainer. SHOAL_FAILED_PRECONDITION once the client has started. */
SHOAL_EXPORT shoal_status shoal_client_use_builtin_trainer(shoal_client* client, const shoal_builtin_options* options);

/* Connects, joins and trains until the aggregator says Bye (SHOAL_OK), shoal_client_cancel
 * is called (SHOAL_CANCELLED), the aggregator cannot be reached (SHOAL_UNAVAILABLE), or the
 * handshake keeps failing (SHOAL_PERMISSION_DENIED / SHOAL_UNAVAILABLE). Blocks. Needs a
 * trainer (SHOAL_FAILED_PRECONDITION otherwise). Once the run is over, later calls return
 * SHOAL_FAILED_PRECONDITION: create a new client to run again. */
SHOAL_EXPORT shoal_status shoal_client_run(shoal_client* client);

/* For an application's own event loop, instead of shoal_client_run: does the client's work
 * for up to timeout_ms and returns. While the run goes on it returns SHOAL_OK with *finished
 * = 0; when it is over, *finished = 1 and the status is the run's result (what
 * shoal_client_run would have returned; later steps return it again). Any status other than
 * SHOAL_OK comes with *finished = 1, also for misuse (NULL client, no trainer yet), so
 * `while (!finished)` loops end. Local training runs on the client's training thread, so a
 * step does not wait for it, except while a round is abandoned (see shoal_trainer).
 * `finished` may be NULL. */
SHOAL_EXPORT shoal_status shoal_client_step(shoal_client* client, uint32_t timeout_ms, int* finished);

/* Makes a running shoal_client_run/step return SHOAL_CANCELLED promptly (local training is
 * told through shoal_train_cancelled); before the run starts, the run returns at once.
 * Thread-safe: meant to be called from another thread while the client runs (as is
 * shoal_client_get_stats), and async-signal-safe for a valid handle (a SIGINT handler may
 * call it). Not after, or at the same time as, shoal_client_destroy. */
SHOAL_EXPORT shoal_status shoal_client_cancel(shoal_client* client);

typedef struct shoal_client_stats {
  size_t struct_size;        /* set by the caller: sizeof(shoal_client_stats) */
  uint64_t rounds_trained;
  uint64_t bytes_sent;
  uint64_t bytes_received;
  uint64_t reconnects;
  uint64_t errors_received;  /* Error replies from the aggregator */
  uint64_t resyncs;          /* full-model resyncs this client asked for */
} shoal_client_stats;
/* Fills *stats (the fields stats->struct_size covers). Thread-safe: may run while another
 * thread runs the client; not after, or at the same time as, shoal_client_destroy. */
SHOAL_EXPORT shoal_status shoal_client_get_stats(const shoal_client* client, shoal_client_stats* stats);

/* The message of the last failed call on this client ("" if none). Valid until the next call
 * on this client. Not for use while another thread runs the client. */
SHOAL_EXPORT const char* shoal_client_last_error(const shoal_client* client);

/* Frees the client: joins its training thread (cancelling a round in progress), calls the
 * trainer's destroy, frees everything. Call it on the thread that runs the client, after
 * run/step has returned (to stop a run from elsewhere: shoal_client_cancel, then wait for
 * run/step to return). No other call on this client may follow or overlap it. NULL is a
 * no-op. */
SHOAL_EXPORT void shoal_client_destroy(shoal_client* client);

/* ---- the serverless peer (shoal/peer.h; README "Serverless peers") ----------------- */

typedef struct shoal_peer shoal_peer;

/* One finished step, as this peer's replica stands after it. Valid during the call. */
typedef struct shoal_peer_step {
  size_t struct_size;
  uint64_t step;           /* 1, 2, ... */
  uint32_t members;        /* live members, this peer included */
  uint32_t included;       /* updates the step applied */
  double train_loss;       /* mean training loss of the included updates */
  const char* model_hash;  /* hex BLAKE2b-256 of the replica, as in the metrics */
  const float* params;     /* the replica, num_params floats in layout order */
  size_t num_params;
} shoal_peer_step;
/* Called on the thread in shoal_peer_run after every step (to checkpoint, to report). The
 * swarm waits while it runs: keep it short. */
typedef void (*shoal_peer_step_fn)(void* user, const shoal_peer_step* step);

/* The swarm's settings are the founding peer's (the one with no bootstrap); a joining peer
 * receives them, and only its own name, endpoints, keys, trainer and callbacks apply. */
typedef struct shoal_peer_options {
  size_t struct_size;               /* set by shoal_peer_options_init */
  const char* name;                 /* unique in the swarm, 1-64 printable characters. Default (NULL): "peer-<pid>" */
  const char* listen;               /* this peer's endpoint. Default: "tcp://127.0.0.1:7101" */
  const char* advertise;            /* the endpoint other peers reach this one at. Default (NULL): listen */
  const char* bootstrap;            /* peers to join through, comma-separated "ENDPOINT" or, with keys,
                                       "ENDPOINT@KEY_OR_PUBFILE". Default (NULL or ""): found the swarm */
  const char* secret_key_file;      /* this peer's PREFIX.key (shoal-keygen). Default: NULL */
  const char* allow_keys;           /* the peers' public keys: file or directory. Default: NULL */
  int insecure;                     /* nonzero: non-loopback links without keys. Default: 0 */
  const char* mode;                 /* "allgather", "diloco" or "gossip". Default: "allgather" */
  const char* model;                /* the model's name (a model spec for the built-in trainer). Default: "mlp" */
  size_t num_tensors;               /* the model's layout (required with the application's trainer) */
  const shoal_tensor* tensors;      /* offsets must run 0, size0, size0+size1, ... */
  const float* initial_params;      /* the founder's starting model, in layout order; NULL: zeros
                                       (application's trainer) or the built-in model's init */
  size_t num_initial_params;
  const char* optimizer;            /* "sgd", "adamw" or "demo" (see shoal/peer.h per mode). Default: "sgd" */
  float learning_rate;              /* Default: 0.05 */
  float momentum;                   /* Default: 0 */
  float weight_decay;               /* Default: 0 */
  uint32_t batch_size;              /* Default: 32 */
  uint64_t seed;                    /* Default: 0 */
  const char* codec;                /* update codec spec, e.g. "int8". Default: "none" */
  uint64_t steps;                   /* stop after this many steps; 0: until shoal_peer_stop. Default: 0 */
  uint32_t min_peers;               /* step 1 waits for this many members. Default: 1 */
  uint32_t step_timeout_ms;         /* Default: 2000 */
  uint32_t heartbeat_interval_ms;   /* Default: 200 */
  uint32_t heartbeat_timeout_ms;    /* a member silent this long is dropped. Default: 2000 */
  uint32_t join_timeout_ms;         /* Default: 30000 */
  uint32_t diloco_inner_steps;      /* Default: 100 */
  float diloco_outer_lr;            /* Default: 0.7 */
  float diloco_outer_momentum;      /* Default: 0.9 */
  uint32_t gossip_k;                /* Default: 2 */
  uint32_t eval_every;              /* trainer evaluation every N steps (0: at the end only). Default: 10 */
  const char* metrics_out;          /* JSON lines, one per step. Default: NULL (none) */
  shoal_peer_step_fn on_step;       /* Default: NULL */
  void* step_user;                  /* passed to on_step */
  /* Added after ABI 2: read only when struct_size covers it. */
  int overlap;                      /* allgather and diloco, nonzero: each step's update starts from the replica
                                       one step older, so a step's exchange overlaps the next step's work
                                       (shoal/peer.h, PeerOptions::overlap). Default: 0 */
} shoal_peer_options;

/* As shoal_client_options_init: pass sizeof(shoal_peer_options). */
SHOAL_EXPORT shoal_status shoal_peer_options_init(shoal_peer_options* options, size_t struct_size);
/* Creates a peer (it does not bind yet) into *peer; free it with shoal_peer_destroy. Options
 * (strings, the layout, the initial parameters) are copied. */
SHOAL_EXPORT shoal_status shoal_peer_create(const shoal_peer_options* options, shoal_peer** peer);
/* The application's trainer (copied; as shoal_client_set_trainer). Each mode drives it as
 * shoal/peer.h says: allgather calls train() with one step at learning rate 1 and the task's
 * optimizer replaced by plain SGD; diloco with diloco_inner_steps steps; gossip with one. */
SHOAL_EXPORT shoal_status shoal_peer_set_trainer(shoal_peer* peer, const shoal_trainer* trainer);
/* The built-in trainer on a part of a dataset (as shoal_client_use_builtin_trainer). */
SHOAL_EXPORT shoal_status shoal_peer_use_builtin_trainer(shoal_peer* peer, const shoal_builtin_options* options);
/* Binds, joins (or founds) the swarm and trains until `steps` steps are done (SHOAL_OK),
 * shoal_peer_stop is called (SHOAL_OK after leaving gracefully), joining fails
 * (SHOAL_UNAVAILABLE, SHOAL_PERMISSION_DENIED) or the trainer fails (its status). Blocks.
 * Needs a trainer; runs once per peer (then SHOAL_FAILED_PRECONDITION). */
SHOAL_EXPORT shoal_status shoal_peer_run(shoal_peer* peer);
/* Makes shoal_peer_run leave the swarm and return. Thread-safe and async-signal-safe for a
 * valid handle; before the run, the run returns at once. */
SHOAL_EXPORT shoal_status shoal_peer_stop(shoal_peer* peer);
/* The message of the last failed call on this peer ("" if none); valid until the next call. */
SHOAL_EXPORT const char* shoal_peer_last_error(const shoal_peer* peer);
/* Frees the peer. After shoal_peer_run has returned (the trainer's destroy has run when the
 * run ended; for a peer that never ran, it runs here). NULL is a no-op. */
SHOAL_EXPORT void shoal_peer_destroy(shoal_peer* peer);

/* ---- the aggregator (shoal/server.h; README "The aggregator as a library"; ABI 3) --- */

typedef struct shoal_server shoal_server;

/* One committed round, as the server reports it. Valid during the call. */
typedef struct shoal_round_report {
  size_t struct_size;
  uint64_t round;
  uint32_t clients_selected, clients_reported, clients_dropped, clients_registered;
  double test_loss, test_accuracy;  /* the evaluator's (or the held-out split's) score after the round */
  double train_loss;                /* the clients' reported mean, weighted by examples */
  uint64_t bytes_up, bytes_down;    /* frames on the wire this round */
  double seconds;                   /* from the tasks going out to the round's close */
  const char* model_hash;           /* of the global model after the round (BLAKE2b-256, hex) */
  int model_updated;                /* nonzero when the round changed the model */
  uint64_t evaluations_failed;      /* rounds so far whose evaluator failed (each still committed) */
} shoal_round_report;
/* Called on the thread in shoal_server_run/step after each round is committed (metrics
 * written, checkpoint saved). */
typedef void (*shoal_round_fn)(void* user, const shoal_round_report* report);

typedef struct shoal_server_options {
  size_t struct_size;             /* set by shoal_server_options_init */
  /* Transport */
  const char* listen;             /* ZeroMQ endpoint to bind. Default: "tcp://0.0.0.0:7070" (all interfaces) ("tcp://127.0.0.1:0": a free
                                     port, see shoal_server_endpoint) */
  const char* secret_key_file;    /* this aggregator's PREFIX.key (shoal-keygen): CurveZMQ. Default: NULL */
  const char* allow_keys;         /* the clients' public keys: a file or a directory. Default: NULL */
  int insecure;                   /* nonzero: a non-loopback listen without keys. Default: 0 */
  /* Rounds */
  uint64_t rounds;                /* stop after this many rounds (Bye to clients); 0: until stopped. Default: 0 */
  uint32_t min_clients;           /* registered clients needed before a round starts. Default: 2 */
  double fraction;                /* share of registered clients selected per round, (0, 1]. Default: 1 */
  uint32_t min_results;           /* fewer updates than this leave the model unchanged. Default: 1 */
  uint32_t round_timeout_ms;      /* Default: 60000 */
  uint32_t heartbeat_interval_ms; /* Default: 1000 */
  uint32_t heartbeat_timeout_ms;  /* a client silent this long is dropped. Default: 10000 */
  uint32_t max_clients;           /* registration cap. Default: 1000 */
  double max_update_norm;         /* updates with a larger L2 norm are refused; 0: no bound. Default: 1e4 */
  /* Task (sent to every client) and strategy */
  const char* model;              /* model spec, e.g. "linear", "mlp:64". Default: "mlp" */
  const char* dataset;            /* e.g. "digits", "csv:PATH". Default: "digits" */
  const char* data_dir;           /* Default: NULL ($SHOAL_DATA_DIR or ~/.cache/shoal) */
  uint64_t seed;                  /* Default: 0 */
  double test_fraction;           /* held-out share of the dataset. Default: 0.2 */
  const char* standardize;        /* "auto" (on for csv:), "on", "off": features scaled by the training split's
                                     statistics, sent in the task (the application's trainers must apply them:
                                     "off" for trainers that do not). Default: "auto" */
  const char* strategy;           /* "fedavg", "fedprox", "fedadam", "median", "fedbuff", ... Default: "fedavg" */
  float learning_rate;            /* the clients'. Default: 0.1 */
  uint32_t local_epochs;          /* Default: 1 */
  uint32_t local_steps;           /* > 0: this many local steps a round instead of epochs. Default: 0 */
  uint32_t batch_size;            /* Default: 32 */
  const char* optimizer;          /* the clients': "sgd", "adamw", "demo". Default: "sgd" */
  float momentum;                 /* sgd. Default: 0.9 */
  float weight_decay;             /* Default: 0 */
  float server_learning_rate;     /* 0: the strategy's default. Default: 0 */
  const char* codec;              /* upload codec spec, e.g. "int8". Default: "none" */
  const char* codec_down;         /* download codec spec. Default: NULL (the upload codec) */
  /* Privacy */
  int secagg;                     /* nonzero: secure aggregation (SecAgg+). Default: 0 */
  double dp_clip;                 /* > 0: differential privacy with this L2 bound. Default: 0 */
  double dp_noise_multiplier;     /* Default: 0 */
  /* Outputs */
  const char* metrics_out;        /* JSON lines, one per round. Default: NULL (none) */
  const char* checkpoint_dir;     /* checkpoint each round here. Default: NULL (none) */
  int resume;                     /* nonzero: continue from checkpoint_dir's last round. Default: 0 */
  int print_table;                /* nonzero: a per-round table on stdout. Default: 0 */
  shoal_round_fn on_round;        /* Default: NULL */
  void* round_user;               /* passed to on_round */
} shoal_server_options;

/* Handed to evaluate() for the duration of the call. */
typedef struct shoal_eval_context shoal_eval_context;
/* Adds a named value to the round's report (the metrics line's "eval_<name>"); name is 1 to 64
 * of [a-z0-9_] (else the round's evaluation counts as failed). Only during evaluate(). */
SHOAL_EXPORT shoal_status shoal_eval_metric(shoal_eval_context* context, const char* name, double value);

#define SHOAL_EVALUATOR_VERSION 1

/* The application's evaluation of the global model, in place of the aggregator's own on the
 * dataset's held-out split. Callbacks run on the thread in shoal_server_run/step; error, of
 * error_size bytes, takes a reason when one fails (returns nonzero). */
typedef struct shoal_evaluator {
  uint32_t version;  /* SHOAL_EVALUATOR_VERSION */
  void* user;        /* passed to every callback */
  /* Optional (NULL). Once, before the first round, with the task (its layout). A failure
   * ends the run with it. */
  int (*configure)(void* user, const shoal_task* task, char* error, size_t error_size);
  /* Required. Scores `count` floats (the committed global model, in layout order) after
   * round `round`. A failure is logged and counted (shoal_round_report.evaluations_failed);
   * the round keeps its commit and the run goes on. */
  int (*evaluate)(void* user, uint64_t round, const float* params, size_t count, shoal_eval_context* context,
                  double* loss, double* accuracy, char* error, size_t error_size);
  /* Optional (NULL). Called once when the server no longer needs `user` (destroyed, or the
   * evaluator replaced). */
  void (*destroy)(void* user);
} shoal_evaluator;

/* As shoal_client_options_init: pass sizeof(shoal_server_options). */
SHOAL_EXPORT shoal_status shoal_server_options_init(shoal_server_options* options, size_t struct_size);
/* Loads the dataset, builds the model (or restores the checkpoint) and binds the endpoint, into
 * *server; free it with shoal_server_destroy. A bad option, a port in use or a missing dataset
 * fails here with a message. */
SHOAL_EXPORT shoal_status shoal_server_create(const shoal_server_options* options, shoal_server** server);
/* The application's evaluator (copied); before the first run or step (else
 * SHOAL_FAILED_PRECONDITION). NULL goes back to the built-in evaluation. */
SHOAL_EXPORT shoal_status shoal_server_set_evaluator(shoal_server* server, const shoal_evaluator* evaluator);
/* Serves until shoal_server_stop (SHOAL_OK) or `rounds` rounds are done (clients get Bye;
 * SHOAL_OK). Other statuses only for failures that make serving impossible. Once per server. */
SHOAL_EXPORT shoal_status shoal_server_run(shoal_server* server);
/* For an application's own event loop, instead of shoal_server_run: serves for about
 * timeout_ms, or until a round is committed if that comes first, and returns. *finished = 0 while the run goes on; once it is over, *finished = 1
 * and the status is what shoal_server_run would have returned (later steps return it again). */
SHOAL_EXPORT shoal_status shoal_server_step(shoal_server* server, uint32_t timeout_ms, int* finished);
/* Makes a running shoal_server_run/step finish promptly (checkpointed rounds are kept;
 * clients are not told and wait for the server to come back).
 * Thread-safe and async-signal-safe for a valid handle. */
SHOAL_EXPORT shoal_status shoal_server_stop(shoal_server* server);
/* Ends training as if the last round were done: the open round is abandoned, every client
 * gets Bye, and run/step finish with SHOAL_OK. Thread-safe and async-signal-safe. */
SHOAL_EXPORT shoal_status shoal_server_finish(shoal_server* server);
/* The endpoint bound (with the port chosen for port 0). Valid until shoal_server_destroy;
 * NULL for NULL. */
SHOAL_EXPORT const char* shoal_server_endpoint(const shoal_server* server);
/* The message of the last failed call on this server ("" if none); valid until the next call. */
SHOAL_EXPORT const char* shoal_server_last_error(const shoal_server* server);
/* Frees the server (after run/step has returned), calling the evaluator's destroy. NULL is a
 * no-op. */
SHOAL_EXPORT void shoal_server_destroy(shoal_server* server);

/* ---- datasets (for applications that train themselves on Shoal's datasets) --------- */

typedef struct shoal_dataset shoal_dataset;
/* Loads dataset `name` ("digits", "csv:PATH", "idx:IMAGES,LABELS"; data_dir NULL = the default
 * cache), holds out the aggregator's test split for (seed, test_fraction) (pass the task's, so
 * you never train on the aggregator's held-out examples), and keeps part `index` of `count` of
 * the training split under `scheme` ("iid", "dirichlet:ALPHA"; NULL = "iid"). Free it with
 * shoal_dataset_destroy. Feature datasets only: a token dataset ("kjv", "text:PATH") gives
 * SHOAL_INVALID_ARGUMENT. */
SHOAL_EXPORT shoal_status shoal_dataset_load(const char* name, const char* data_dir, uint64_t seed, double test_fraction,
                                             uint32_t index, uint32_t count, const char* scheme, shoal_dataset** dataset);
/* Rows, features per row and classes (labels lie in [0, classes)); 0 for NULL. */
SHOAL_EXPORT size_t shoal_dataset_rows(const shoal_dataset* dataset);
SHOAL_EXPORT size_t shoal_dataset_dim(const shoal_dataset* dataset);
SHOAL_EXPORT uint32_t shoal_dataset_classes(const shoal_dataset* dataset);
/* rows x dim floats, row-major / rows labels; owned by the dataset, valid until it is
 * destroyed; NULL for NULL. */
SHOAL_EXPORT const float* shoal_dataset_features(const shoal_dataset* dataset);
SHOAL_EXPORT const int32_t* shoal_dataset_labels(const shoal_dataset* dataset);
/* NULL is a no-op. */
SHOAL_EXPORT void shoal_dataset_destroy(shoal_dataset* dataset);

#ifdef __cplusplus
}
#endif

#endif /* SHOAL_SHOAL_H_ */
