/* The C ABI test, compiled as C (C11, for <stdatomic.h>; the header itself is C99, which
 * examples/c checks): every function in shoal/shoal.h, used correctly against a
 * real shoal-aggregator on 127.0.0.1 and misused (NULL handles, wrong struct sizes and
 * versions, callbacks that fail, cancel during training), each misuse answered by an error
 * code and a message. Also run under ASan/UBSan by scripts/test.
 *
 *   capi_test AGGREGATOR_BINARY WORK_DIR
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "capi_common.h"

extern char** environ;

static const char* g_aggregator;

/* ---- a real aggregator -------------------------------------------------------------------- */

typedef struct aggregator {
  pid_t pid;
  int port;
  char endpoint[64];
  char metrics[512];
} aggregator;

/* Starts shoal-aggregator on a free port: `model` on the blobs CSV, `rounds` rounds once
 * `min_clients` clients have joined. The features stay as written (--standardize off): the
 * applications' trainers read the CSV themselves and do not standardize. */
static aggregator start_aggregator(const char* label, const char* model, int rounds, int min_clients,
                                   const char* round_timeout) {
  aggregator a;
  memset(&a, 0, sizeof a);
  a.port = free_port();
  snprintf(a.endpoint, sizeof a.endpoint, "tcp://127.0.0.1:%d", a.port);
  snprintf(a.metrics, sizeof a.metrics, "%s/%s.jsonl", g_dir, label);
  char dataset[600], rounds_s[16], min_s[16], log[600];
  snprintf(dataset, sizeof dataset, "csv:%s", g_csv);
  snprintf(rounds_s, sizeof rounds_s, "%d", rounds);
  snprintf(min_s, sizeof min_s, "%d", min_clients);
  snprintf(log, sizeof log, "%s/%s.log", g_dir, label);
  char* argv[] = {(char*)g_aggregator, "--listen", a.endpoint, "--rounds", rounds_s, "--min-clients", min_s,
                  "--model", (char*)model, "--dataset", dataset, "--standardize", "off", "--seed", "3", "--lr", "0.5",
                  "--metrics-out", a.metrics, "--round-timeout", (char*)round_timeout, "--heartbeat-interval", "0.2",
                  "--heartbeat-timeout", "3", "--log-level", "warn", NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (posix_spawn(&a.pid, g_aggregator, &fa, NULL, argv, environ) != 0) {
    perror("posix_spawn shoal-aggregator");
    exit(2);
  }
  posix_spawn_file_actions_destroy(&fa);
  return a;
}

/* Waits for the aggregator to exit (SIGKILL after timeout_s); returns its exit code. */
static int wait_aggregator(aggregator* a, int timeout_s) {
  for (int i = 0; i < timeout_s * 20; ++i) {
    int status = 0;
    if (waitpid(a->pid, &status, WNOHANG) == a->pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    sleep_ms(50);
  }
  kill(a->pid, SIGKILL);
  waitpid(a->pid, NULL, 0);
  fprintf(stderr, "aggregator on port %d did not finish within %d s\n", a->port, timeout_s);
  return -1;
}

static void stop_aggregator(aggregator* a) {
  kill(a->pid, SIGTERM);
  wait_aggregator(a, 10);
}

/* The value of "key": in the last line of a JSON-lines file, or NAN. */
static double last_metric(const char* path, const char* key) {
  FILE* f = fopen(path, "r");
  if (!f) return NAN;
  static char line[65536], last[65536];
  last[0] = '\0';
  while (fgets(line, sizeof line, f))
    if (line[0] == '{') memcpy(last, line, sizeof line);
  fclose(f);
  char pattern[128];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char* at = strstr(last, pattern);
  return at ? strtod(at + strlen(pattern), NULL) : NAN;
}

static shoal_client* new_client(const char* endpoint, const char* name) {
  shoal_client_options o;
  CHECK_STATUS(shoal_client_options_init(&o, sizeof o), SHOAL_OK);
  o.connect = endpoint;
  o.name = name;
  o.connect_timeout_ms = 20000;
  o.reconnect_timeout_ms = 20000;
  shoal_client* c = NULL;
  CHECK_STATUS(shoal_client_create(&o, &c), SHOAL_OK);
  return c;
}

/* ---- version, status names, misuse -------------------------------------------------------- */

static void test_version_and_names(void) {
  CHECK(shoal_abi_version() == SHOAL_ABI_VERSION);
  CHECK(shoal_version() && strlen(shoal_version()) >= 5);
  CHECK(strcmp(shoal_status_name(SHOAL_OK), "OK") == 0);
  CHECK(strcmp(shoal_status_name(SHOAL_PERMISSION_DENIED), "PermissionDenied") == 0);
  CHECK(strcmp(shoal_status_name(-1), "Unknown") == 0);
  CHECK(strcmp(shoal_status_name(99), "Unknown") == 0);
}

static int dummy_configure(void* u, const shoal_task* t, char* e, size_t n) { (void)u, (void)t, (void)e, (void)n; return 0; }
static int dummy_params(void* u, const float* p, size_t c, char* e, size_t n) { (void)u, (void)p, (void)c, (void)e, (void)n; return 0; }
static int dummy_get(void* u, float* p, size_t c, char* e, size_t n) { (void)u, (void)p, (void)c, (void)e, (void)n; return 0; }
static int dummy_train(void* u, const shoal_round* r, shoal_train_context* x, uint64_t* ne, double* l, char* e, size_t n) {
  (void)u, (void)r, (void)x, (void)e, (void)n;
  *ne = 1;
  *l = 0;
  return 0;
}
static int g_destroyed = 0;
static void count_destroy(void* u) { (void)u, ++g_destroyed; }

static shoal_trainer dummy_trainer(void) {
  shoal_trainer t;
  memset(&t, 0, sizeof t);
  t.version = SHOAL_TRAINER_VERSION;
  t.configure = dummy_configure;
  t.set_parameters = dummy_params;
  t.get_parameters = dummy_get;
  t.train = dummy_train;
  t.destroy = count_destroy;
  return t;
}

static void test_misuse(void) {
  shoal_client_options o;
  CHECK_STATUS(shoal_client_options_init(&o, sizeof o), SHOAL_OK);
  CHECK(o.struct_size == sizeof o && o.connect_timeout_ms > 0 && o.max_handshake_failures == 3);
  shoal_client* c = (shoal_client*)&o; /* must be overwritten with NULL on failure */

  /* NULL handles and pointers. */
  CHECK_STATUS(shoal_client_create(NULL, &c), SHOAL_INVALID_ARGUMENT);
  CHECK(c == NULL);
  CHECK_ERROR_MENTIONS("options is NULL");
  CHECK_STATUS(shoal_client_create(&o, NULL), SHOAL_INVALID_ARGUMENT);
  shoal_trainer t = dummy_trainer();
  CHECK_STATUS(shoal_client_set_trainer(NULL, &t), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("client is NULL");
  shoal_builtin_options b;
  CHECK_STATUS(shoal_builtin_options_init(&b, sizeof b), SHOAL_OK);
  CHECK(b.struct_size == sizeof b && strcmp(b.dataset, "digits") == 0 && b.partition_count == 1);
  CHECK(b.ranks == 1 && b.bucket_bytes == (size_t)25 << 20);
  CHECK_STATUS(shoal_client_use_builtin_trainer(NULL, &b), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_client_run(NULL), SHOAL_INVALID_ARGUMENT);
  int finished = 7;
  CHECK_STATUS(shoal_client_step(NULL, 0, &finished), SHOAL_INVALID_ARGUMENT);
  CHECK(finished == 1); /* any failure ends a `while (!finished)` loop */
  CHECK_STATUS(shoal_client_cancel(NULL), SHOAL_INVALID_ARGUMENT);
  shoal_client_stats stats;
  stats.struct_size = sizeof stats;
  CHECK_STATUS(shoal_client_get_stats(NULL, &stats), SHOAL_INVALID_ARGUMENT);
  CHECK(strlen(shoal_client_last_error(NULL)) > 0);
  shoal_client_destroy(NULL);
  CHECK_STATUS(shoal_client_options_init(NULL, sizeof o), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_builtin_options_init(NULL, sizeof b), SHOAL_INVALID_ARGUMENT);
  /* An init given a size this library does not know writes nothing. */
  {
    unsigned char buf[sizeof(shoal_client_options) + 64];
    memset(buf, 0xAB, sizeof buf);
    CHECK_STATUS(shoal_client_options_init((shoal_client_options*)buf, 8), SHOAL_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS("struct_size is 8");
    CHECK_STATUS(shoal_client_options_init((shoal_client_options*)buf, sizeof buf), SHOAL_INVALID_ARGUMENT);
    CHECK_STATUS(shoal_builtin_options_init((shoal_builtin_options*)buf, 4), SHOAL_INVALID_ARGUMENT);
    int untouched = 1;
    for (size_t i = 0; i < sizeof buf; ++i) untouched &= buf[i] == 0xAB;
    CHECK(untouched);
  }
  CHECK(shoal_train_cancelled(NULL) == 0);
  shoal_train_progress(NULL, 0.5f);

  /* Struct sizes this library does not know: too small (an older, truncated struct) or larger
   * (built against a newer header). */
  o.struct_size = 8;
  CHECK_STATUS(shoal_client_create(&o, &c), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("struct_size is 8");
  o.struct_size = sizeof o + 16;
  CHECK_STATUS(shoal_client_create(&o, &c), SHOAL_INVALID_ARGUMENT);
  CHECK(c == NULL);
  CHECK_STATUS(shoal_client_options_init(&o, sizeof o), SHOAL_OK);
  o.connect_timeout_ms = 0;
  CHECK_STATUS(shoal_client_create(&o, &c), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("connect_timeout_ms");

  CHECK_STATUS(shoal_client_options_init(&o, sizeof o), SHOAL_OK);
  CHECK_STATUS(shoal_client_create(&o, &c), SHOAL_OK);
  CHECK(c != NULL);
  CHECK_STATUS(shoal_client_get_stats(c, NULL), SHOAL_INVALID_ARGUMENT);
  stats.struct_size = 3;
  CHECK_STATUS(shoal_client_get_stats(c, &stats), SHOAL_INVALID_ARGUMENT);
  stats.struct_size = sizeof stats;
  CHECK_STATUS(shoal_client_get_stats(c, &stats), SHOAL_OK);
  CHECK(stats.rounds_trained == 0 && stats.bytes_sent == 0);

  /* Running before a trainer is set is out of order. */
  CHECK_STATUS(shoal_client_run(c), SHOAL_FAILED_PRECONDITION);
  CHECK(strstr(shoal_client_last_error(c), "no trainer") != NULL);
  finished = 0;
  CHECK_STATUS(shoal_client_step(c, 0, &finished), SHOAL_FAILED_PRECONDITION);
  CHECK(finished == 1);
  CHECK(strstr(shoal_client_last_error(c), "no trainer") != NULL);

  /* A trainer of another version, or without a required callback. */
  CHECK_STATUS(shoal_client_set_trainer(c, NULL), SHOAL_INVALID_ARGUMENT);
  t.version = SHOAL_TRAINER_VERSION + 1;
  CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_INVALID_ARGUMENT);
  CHECK(strstr(shoal_client_last_error(c), "version") != NULL);
  CHECK_ERROR_MENTIONS("version");
  t = dummy_trainer();
  t.train = NULL;
  t.get_parameters = NULL;
  CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("get_parameters train");

  /* Built-in trainer: bad struct size, bad partition, a missing file. */
  b.struct_size = 1;
  CHECK_STATUS(shoal_client_use_builtin_trainer(c, &b), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_builtin_options_init(&b, sizeof b), SHOAL_OK);
  b.partition_index = 2;
  b.partition_count = 2;
  CHECK_STATUS(shoal_client_use_builtin_trainer(c, &b), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("partition_index");
  CHECK_STATUS(shoal_builtin_options_init(&b, sizeof b), SHOAL_OK);
  b.ranks = 0;
  CHECK_STATUS(shoal_client_use_builtin_trainer(c, &b), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("ranks must be at least 1");
  CHECK_STATUS(shoal_builtin_options_init(&b, sizeof b), SHOAL_OK);
  b.dataset = "csv:/nonexistent/shoal-capi.csv";
  CHECK_STATUS(shoal_client_use_builtin_trainer(c, &b), SHOAL_NOT_FOUND);
  CHECK_ERROR_MENTIONS("/nonexistent/shoal-capi.csv");
  CHECK(strstr(shoal_client_last_error(c), "/nonexistent/shoal-capi.csv") != NULL);

  /* A trainer replaced before the run is destroyed once; the last one when the client goes. */
  g_destroyed = 0;
  t = dummy_trainer();
  CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_OK);
  CHECK(strcmp(shoal_client_last_error(c), "") == 0);
  CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_OK);
  CHECK(g_destroyed == 1);
  shoal_client_destroy(c);
  CHECK(g_destroyed == 2);

  /* Log levels out of range. */
  CHECK_STATUS(shoal_set_log_callback(NULL, NULL, 7), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_set_log_callback(NULL, NULL, -1), SHOAL_INVALID_ARGUMENT);

  /* Datasets. */
  shoal_dataset* d = (shoal_dataset*)&o;
  CHECK_STATUS(shoal_dataset_load(NULL, NULL, 1, 0.2, 0, 1, NULL, &d), SHOAL_INVALID_ARGUMENT);
  CHECK(d == NULL);
  CHECK_STATUS(shoal_dataset_load("digits", NULL, 1, 0.2, 0, 1, NULL, NULL), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_dataset_load("digits", NULL, 1, 0.2, 1, 1, NULL, &d), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_dataset_load("csv:/nonexistent/x.csv", NULL, 1, 0.2, 0, 1, NULL, &d), SHOAL_NOT_FOUND);
  CHECK_STATUS(shoal_dataset_load("nonsense", NULL, 1, 0.2, 0, 1, NULL, &d), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_dataset_load("digits", NULL, 1, 1.5, 0, 1, NULL, &d), SHOAL_INVALID_ARGUMENT);
  CHECK(shoal_dataset_rows(NULL) == 0 && shoal_dataset_dim(NULL) == 0 && shoal_dataset_classes(NULL) == 0);
  CHECK(shoal_dataset_features(NULL) == NULL && shoal_dataset_labels(NULL) == NULL);
  shoal_dataset_destroy(NULL);
}

/* The held-out split and partitions: parts are disjoint and, with the test split, cover the file. */
static void test_dataset(void) {
  char spec[600];
  snprintf(spec, sizeof spec, "csv:%s", g_csv);
  shoal_dataset *a = NULL, *b = NULL, *all = NULL;
  CHECK_STATUS(shoal_dataset_load(spec, NULL, 3, 0.25, 0, 2, "iid", &a), SHOAL_OK);
  CHECK_STATUS(shoal_dataset_load(spec, NULL, 3, 0.25, 1, 2, NULL, &b), SHOAL_OK);
  CHECK_STATUS(shoal_dataset_load(spec, NULL, 3, 0.0, 0, 1, NULL, &all), SHOAL_OK);
  CHECK(shoal_dataset_rows(all) == 400);
  CHECK(shoal_dataset_rows(a) + shoal_dataset_rows(b) == 300); /* 25 % held out */
  CHECK(shoal_dataset_dim(a) == 8 && shoal_dataset_classes(a) == 4);
  /* Part 0 holds no row of part 1. */
  int overlap = 0;
  for (size_t i = 0; i < shoal_dataset_rows(a); ++i)
    for (size_t j = 0; j < shoal_dataset_rows(b); ++j)
      overlap += memcmp(shoal_dataset_features(a) + i * 8, shoal_dataset_features(b) + j * 8, 8 * sizeof(float)) == 0;
  CHECK(overlap == 0);
  for (size_t i = 0; i < shoal_dataset_rows(a); ++i) CHECK(shoal_dataset_labels(a)[i] >= 0 && shoal_dataset_labels(a)[i] < 4);
  shoal_dataset_destroy(a);
  shoal_dataset_destroy(b);
  shoal_dataset_destroy(all);

  /* The same file as text is a token dataset, which the C ABI's datasets do not give. */
  snprintf(spec, sizeof spec, "text:%s", g_csv);
  shoal_dataset* text = NULL;
  CHECK_STATUS(shoal_dataset_load(spec, NULL, 3, 0.25, 0, 2, "iid", &text), SHOAL_INVALID_ARGUMENT);
  CHECK(text == NULL);
  CHECK(strstr(shoal_last_error(), "holds tokens") != NULL);
}

/* ---- federated runs ----------------------------------------------------------------------- */

/* Two log destinations the test switches between while clients run: once
 * shoal_set_log_callback has returned, the destination switched away from must never be
 * called again (and ASan sees any use of a freed logger). */
typedef struct log_target {
  atomic_int live, lines, late, below_min;
} log_target;
static void target_log(void* user, int level, const char* message) {
  log_target* t = (log_target*)user;
  if (!atomic_load(&t->live) || !message) atomic_fetch_add(&t->late, 1);
  if (level < SHOAL_LOG_DEBUG) atomic_fetch_add(&t->below_min, 1);
  atomic_fetch_add(&t->lines, 1);
}
typedef struct log_switcher {
  log_target targets[2];
  atomic_int stop, switches;
} log_switcher;
static void* switch_log_targets(void* arg) {
  log_switcher* w = (log_switcher*)arg;
  for (int i = 0; !atomic_load(&w->stop); ++i) {
    log_target* next = &w->targets[i % 2];
    log_target* prev = &w->targets[(i + 1) % 2];
    atomic_store(&next->live, 1);
    CHECK_STATUS(shoal_set_log_callback(target_log, next, SHOAL_LOG_DEBUG), SHOAL_OK);
    atomic_store(&prev->live, 0);
    atomic_fetch_add(&w->switches, 1);
    sleep_ms(1);
  }
  return NULL;
}

typedef struct client_run {
  const char* endpoint;
  const char* name;
  int use_step;
  uint32_t part, parts;
  shoal_status status;
  shoal_client_stats stats;
  int rounds_done_events, progress_events, step_calls;
  char error[512];
} client_run;

static void on_event(void* user, const shoal_event* e) {
  client_run* r = (client_run*)user;
  CHECK(e->struct_size == sizeof *e && e->message != NULL);
  if (e->kind == SHOAL_EVENT_ROUND_DONE) ++r->rounds_done_events;
  if (e->kind == SHOAL_EVENT_PROGRESS) {
    CHECK(e->progress >= 0.0f && e->progress <= 1.0f);
    ++r->progress_events;
  }
}

static void* run_logreg_client(void* arg) {
  client_run* r = (client_run*)arg;
  shoal_client_options o;
  CHECK_STATUS(shoal_client_options_init(&o, sizeof o), SHOAL_OK);
  o.connect = r->endpoint;
  o.name = r->name;
  o.on_event = on_event;
  o.event_user = r;
  shoal_client* c = NULL;
  r->status = shoal_client_create(&o, &c);
  if (r->status != SHOAL_OK) return NULL;
  char spec[600];
  snprintf(spec, sizeof spec, "csv:%s", g_csv);
  logreg lr;
  memset(&lr, 0, sizeof lr);
  lr.dataset = spec;
  lr.part = r->part;
  lr.parts = r->parts;
  shoal_trainer t = logreg_trainer(&lr, 150);
  r->status = shoal_client_set_trainer(c, &t);
  if (r->status == SHOAL_OK && !r->use_step) {
    r->status = shoal_client_run(c);
  } else if (r->status == SHOAL_OK) {
    int finished = 0;
    while (!finished) {
      r->status = shoal_client_step(c, 10, &finished);
      ++r->step_calls;
    }
    /* Over: later steps report the same result; run refuses. */
    int again = 0;
    CHECK(shoal_client_step(c, 0, &again) == r->status && again == 1);
    CHECK_STATUS(shoal_client_run(c), SHOAL_FAILED_PRECONDITION);
  }
  snprintf(r->error, sizeof r->error, "%s", shoal_client_last_error(c));
  r->stats.struct_size = sizeof r->stats;
  CHECK_STATUS(shoal_client_get_stats(c, &r->stats), SHOAL_OK);
  shoal_client_destroy(c);
  return NULL;
}

/* Two applications (one blocking in run, one stepping from its own loop) with their own
 * logistic regression train 4 rounds; the federated model classifies the held-out split, the
 * clients' evaluate() feeds federated evaluation, and log lines reach the callback. */
static void test_federated_run(void) {
  aggregator a = start_aggregator("run", "linear", 4, 2, "20");
  client_run runs[2];
  memset(runs, 0, sizeof runs);
  pthread_t threads[2];
  for (int i = 0; i < 2; ++i) {
    runs[i].endpoint = a.endpoint;
    runs[i].name = i ? "capi-step" : "capi-run";
    runs[i].use_step = i;
    runs[i].part = (uint32_t)i;
    runs[i].parts = 2;
    pthread_create(&threads[i], NULL, run_logreg_client, &runs[i]);
  }
  /* All through the run, log lines (at debug: each client logs every frame) go to one of two
   * callbacks, switched every millisecond. */
  static log_switcher w;
  memset(&w, 0, sizeof w);
  pthread_t switcher;
  pthread_create(&switcher, NULL, switch_log_targets, &w);
  for (int i = 0; i < 2; ++i) pthread_join(threads[i], NULL);
  atomic_store(&w.stop, 1);
  pthread_join(switcher, NULL);
  CHECK_STATUS(shoal_set_log_callback(NULL, NULL, SHOAL_LOG_WARN), SHOAL_OK);
  CHECK(atomic_load(&w.switches) > 10);
  CHECK(atomic_load(&w.targets[0].lines) + atomic_load(&w.targets[1].lines) > 0);
  CHECK(atomic_load(&w.targets[0].late) == 0 && atomic_load(&w.targets[1].late) == 0);
  CHECK(atomic_load(&w.targets[0].below_min) == 0 && atomic_load(&w.targets[1].below_min) == 0);
  CHECK(wait_aggregator(&a, 60) == 0);
  for (int i = 0; i < 2; ++i) {
    if (runs[i].status != SHOAL_OK) fprintf(stderr, "client %s: %s\n", runs[i].name, runs[i].error);
    CHECK_STATUS(runs[i].status, SHOAL_OK);
    CHECK(runs[i].stats.rounds_trained == 4);
    CHECK(runs[i].stats.bytes_sent > 0 && runs[i].stats.bytes_received > 0);
    CHECK(runs[i].rounds_done_events == 4);
  }
  CHECK(runs[1].step_calls > 4);
  CHECK(last_metric(a.metrics, "round") == 4);
  CHECK(last_metric(a.metrics, "clients_reported") == 2);
  CHECK(last_metric(a.metrics, "test_accuracy") > 0.9);
  CHECK(last_metric(a.metrics, "client_eval_accuracy") > 0.8);
}

/* The built-in trainer through the C ABI: Shoal's own MLP on the same file. */
static void test_builtin_trainer(void) {
  aggregator a = start_aggregator("builtin", "mlp:16", 3, 1, "20");
  shoal_client* c = new_client(a.endpoint, "capi-builtin");
  shoal_builtin_options b;
  CHECK_STATUS(shoal_builtin_options_init(&b, sizeof b), SHOAL_OK);
  char spec[600];
  snprintf(spec, sizeof spec, "csv:%s", g_csv);
  b.dataset = spec;
  b.device = "cpu";
  CHECK_STATUS(shoal_client_use_builtin_trainer(c, &b), SHOAL_OK);
  CHECK_STATUS(shoal_client_run(c), SHOAL_OK);
  shoal_client_stats s;
  s.struct_size = sizeof s;
  CHECK_STATUS(shoal_client_get_stats(c, &s), SHOAL_OK);
  CHECK(s.rounds_trained == 3);
  shoal_client_destroy(c);
  CHECK(wait_aggregator(&a, 30) == 0);
  CHECK(last_metric(a.metrics, "test_accuracy") > 0.9);
}

/* Callbacks that fail: configure ends the run with its status and reason; a failed train or
 * get_parameters skips that round (the aggregator times the client out) and the client keeps
 * serving. */
typedef struct flaky {
  logreg lr;
  int train_calls, get_calls;
  /* The thread that runs the client (configure) and the training thread: the same training
   * thread for every callback of every round, and not the runner. */
  pthread_t runner, trainer;
  int trainer_seen, thread_changed;
} flaky;
/* Thread-local, so a new thread is told apart even when it reuses a joined thread's id. */
static _Thread_local int tl_is_training_thread = 0;
static void note_training_thread(flaky* f) {
  if (!f->trainer_seen) {
    f->trainer = pthread_self();
    f->trainer_seen = 1;
    tl_is_training_thread = 1;
  } else if (!pthread_equal(f->trainer, pthread_self()) || !tl_is_training_thread) {
    f->thread_changed = 1;
  }
}
static int flaky_configure(void* u, const shoal_task* t, char* e, size_t n) {
  ((flaky*)u)->runner = pthread_self();
  return logreg_configure(&((flaky*)u)->lr, t, e, n);
}
static int flaky_set(void* u, const float* p, size_t c, char* e, size_t n) {
  note_training_thread((flaky*)u);
  return logreg_set_parameters(&((flaky*)u)->lr, p, c, e, n);
}
static int flaky_get(void* u, float* p, size_t c, char* e, size_t n) {
  flaky* f = (flaky*)u;
  note_training_thread(f);
  if (++f->get_calls == 1) { /* round 2 (round 1's train failed before reading back) */
    snprintf(e, n, "camera roll locked");
    return SHOAL_IO_ERROR;
  }
  return logreg_get_parameters(&f->lr, p, c, e, n);
}
static int flaky_train(void* u, const shoal_round* r, shoal_train_context* x, uint64_t* ne, double* l, char* e, size_t n) {
  flaky* f = (flaky*)u;
  note_training_thread(f);
  if (++f->train_calls == 1) {
    snprintf(e, n, "GPU busy");
    return 12345; /* not a shoal_status: read as Internal */
  }
  return logreg_train(&f->lr, r, x, ne, l, e, n);
}
static void flaky_destroy(void* u) { logreg_release(&((flaky*)u)->lr), ++g_destroyed; }

static shoal_trainer flaky_trainer(flaky* f) {
  shoal_trainer t = logreg_trainer(&f->lr, 150);
  t.user = f;
  t.configure = flaky_configure;
  t.set_parameters = flaky_set;
  t.get_parameters = flaky_get;
  t.train = flaky_train;
  t.evaluate = NULL;
  t.destroy = flaky_destroy;
  return t;
}

static void test_failing_callbacks(void) {
  char spec[600];
  snprintf(spec, sizeof spec, "csv:%s", g_csv);
  /* configure refuses the task (the aggregator trains an MLP, not this logistic regression). */
  {
    aggregator a = start_aggregator("refuse", "mlp:16", 1, 1, "20");
    shoal_client* c = new_client(a.endpoint, "capi-refuse");
    flaky f;
    memset(&f, 0, sizeof f);
    f.lr.dataset = spec;
    f.lr.parts = 1;
    shoal_trainer t = flaky_trainer(&f);
    CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_OK);
    CHECK_STATUS(shoal_client_run(c), SHOAL_INVALID_ARGUMENT);
    CHECK(strstr(shoal_client_last_error(c), "configure callback failed") != NULL);
    CHECK(strstr(shoal_client_last_error(c), "--model linear") != NULL);
    CHECK_ERROR_MENTIONS("--model linear");
    g_destroyed = 0;
    shoal_client_destroy(c);
    CHECK(g_destroyed == 1);
    stop_aggregator(&a);
  }
  /* Round 1: train fails; round 2: get_parameters fails; round 3 succeeds. */
  {
    aggregator a = start_aggregator("flaky", "linear", 3, 1, "2");
    shoal_client* c = new_client(a.endpoint, "capi-flaky");
    flaky f;
    memset(&f, 0, sizeof f);
    f.lr.dataset = spec;
    f.lr.parts = 1;
    shoal_trainer t = flaky_trainer(&f);
    CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_OK);
    CHECK_STATUS(shoal_client_run(c), SHOAL_OK);
    shoal_client_stats s;
    s.struct_size = sizeof s;
    CHECK_STATUS(shoal_client_get_stats(c, &s), SHOAL_OK);
    CHECK(s.rounds_trained == 1);
    CHECK(f.train_calls == 3 && f.get_calls == 2);
    CHECK(f.trainer_seen && !f.thread_changed);         /* one training thread for all rounds */
    CHECK(!pthread_equal(f.trainer, f.runner));         /* and not the thread in run */
    shoal_client_destroy(c);
    CHECK(wait_aggregator(&a, 30) == 0);
    CHECK(last_metric(a.metrics, "round") == 3);
    CHECK(last_metric(a.metrics, "clients_reported") == 1);
  }
}

/* A train() that runs until it sees shoal_train_cancelled (at most 30 s). */
typedef struct slow {
  atomic_int training, saw_cancel;
} slow;
static int slow_train(void* u, const shoal_round* r, shoal_train_context* x, uint64_t* ne, double* l, char* e, size_t n) {
  slow* s = (slow*)u;
  (void)r, (void)ne, (void)l;
  s->training = 1;
  for (int i = 0; i < 3000 && !shoal_train_cancelled(x); ++i) {
    shoal_train_progress(x, (float)i / 3000.0f);
    sleep_ms(10);
  }
  s->saw_cancel = shoal_train_cancelled(x);
  snprintf(e, n, "stopped");
  return SHOAL_CANCELLED;
}
/* How a run is cancelled once train() is running: shoal_client_cancel on another thread, or
 * from a signal handler on the thread blocked in shoal_client_run (a SIGINT handler's way). */
typedef enum { CANCEL_FROM_THREAD, CANCEL_FROM_SIGNAL } cancel_route;
typedef struct canceller {
  shoal_client* client;
  slow* s;
  cancel_route route;
  pthread_t runner;
} canceller;
static _Atomic(shoal_client*) g_signal_client = NULL;
static void cancel_on_signal(int sig) {
  (void)sig;
  shoal_client* c = atomic_load(&g_signal_client);
  if (c) shoal_client_cancel(c); /* async-signal-safe */
}
static void* cancel_when_training(void* arg) {
  canceller* k = (canceller*)arg;
  for (int i = 0; i < 3000 && !k->s->training; ++i) sleep_ms(10);
  if (k->route == CANCEL_FROM_SIGNAL) {
    pthread_kill(k->runner, SIGUSR1);
    return NULL;
  }
  shoal_client_stats st;
  st.struct_size = sizeof st;
  CHECK_STATUS(shoal_client_get_stats(k->client, &st), SHOAL_OK); /* thread-safe while running */
  CHECK_STATUS(shoal_client_cancel(k->client), SHOAL_OK);
  return NULL;
}

/* A client whose train() runs until cancelled, cancelled by `route`: train sees
 * shoal_train_cancelled, run returns SHOAL_CANCELLED promptly. */
static void run_until_cancelled(const char* label, cancel_route route) {
  aggregator a = start_aggregator(label, "linear", 1, 1, "60");
  shoal_client* c = new_client(a.endpoint, label);
  slow s;
  atomic_init(&s.training, 0);
  atomic_init(&s.saw_cancel, 0);
  shoal_trainer t = dummy_trainer();
  t.user = &s;
  t.train = slow_train;
  t.destroy = NULL;
  CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_OK);
  struct sigaction sa, old;
  if (route == CANCEL_FROM_SIGNAL) {
    atomic_store(&g_signal_client, c);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cancel_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, &old);
  }
  canceller k = {c, &s, route, pthread_self()};
  pthread_t th;
  pthread_create(&th, NULL, cancel_when_training, &k);
  const time_t started = time(NULL);
  CHECK_STATUS(shoal_client_run(c), SHOAL_CANCELLED);
  pthread_join(th, NULL);
  if (route == CANCEL_FROM_SIGNAL) {
    sigaction(SIGUSR1, &old, NULL);
    atomic_store(&g_signal_client, NULL);
  }
  CHECK(s.training && s.saw_cancel);
  CHECK(time(NULL) - started < 20);
  shoal_client_destroy(c);
  stop_aggregator(&a);
}

static void test_cancel(void) {
  run_until_cancelled("capi-cancel", CANCEL_FROM_THREAD);
  run_until_cancelled("capi-cancel-signal", CANCEL_FROM_SIGNAL);

  /* Cancelled before it starts: the run returns at once. */
  shoal_client* c = new_client("tcp://127.0.0.1:9", "capi-cancel-early");
  shoal_trainer t = dummy_trainer();
  t.destroy = NULL;
  CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_OK);
  CHECK_STATUS(shoal_client_cancel(c), SHOAL_OK);
  CHECK_STATUS(shoal_client_run(c), SHOAL_CANCELLED);
  shoal_client_destroy(c);
}

/* Nobody listening: a clear Unavailable, not a hang. */
static void test_unreachable(void) {
  shoal_client_options o;
  CHECK_STATUS(shoal_client_options_init(&o, sizeof o), SHOAL_OK);
  char endpoint[64];
  snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", free_port());
  o.connect = endpoint;
  o.connect_timeout_ms = 500;
  shoal_client* c = NULL;
  CHECK_STATUS(shoal_client_create(&o, &c), SHOAL_OK);
  shoal_trainer t = dummy_trainer();
  t.destroy = NULL;
  CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_OK);
  CHECK_STATUS(shoal_client_run(c), SHOAL_UNAVAILABLE);
  CHECK(strstr(shoal_client_last_error(c), endpoint) != NULL);
  shoal_client_destroy(c);
}

/* The privacy policy through the C ABI: its defaults, and a plain task refused by a client that
 * requires secure aggregation (the run ends with FAILED_PRECONDITION naming the setting; the
 * trainer never trains). */
static int g_trained = 0;
static int count_train(void* u, const shoal_round* r, shoal_train_context* x, uint64_t* ne, double* l, char* e, size_t n) {
  ++g_trained;
  return dummy_train(u, r, x, ne, l, e, n);
}

static void test_privacy_policy(void) {
  shoal_client_options o;
  CHECK_STATUS(shoal_client_options_init(&o, sizeof o), SHOAL_OK);
  CHECK(o.require_secagg == 0 && o.min_noise_multiplier == 0 && o.min_neighbours == 1 && o.min_threshold == 1 &&
        o.min_roster == 3 && o.colluding_fraction == 0 && o.trusted_roster == NULL);
  aggregator a = start_aggregator("policy", "linear", 1, 1, "20");
  o.connect = a.endpoint;
  o.name = "careful";
  o.connect_timeout_ms = 20000;
  o.require_secagg = 1;
  shoal_client* c = NULL;
  CHECK_STATUS(shoal_client_create(&o, &c), SHOAL_OK);
  shoal_trainer t = dummy_trainer();
  t.destroy = NULL;
  t.train = count_train;
  CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_OK);
  CHECK_STATUS(shoal_client_run(c), SHOAL_FAILED_PRECONDITION);
  CHECK(strstr(shoal_client_last_error(c), "without secure aggregation") != NULL);
  CHECK(g_trained == 0);
  shoal_client_destroy(c);
  /* A bad policy value is refused when the client starts. */
  o.require_secagg = 0;
  o.colluding_fraction = 1.5;
  CHECK_STATUS(shoal_client_create(&o, &c), SHOAL_OK);
  CHECK_STATUS(shoal_client_set_trainer(c, &t), SHOAL_OK);
  CHECK_STATUS(shoal_client_run(c), SHOAL_INVALID_ARGUMENT);
  CHECK(strstr(shoal_client_last_error(c), "colluding") != NULL);
  shoal_client_destroy(c);
  stop_aggregator(&a);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: capi_test AGGREGATOR_BINARY WORK_DIR\n");
    return 2;
  }
  g_aggregator = argv[1];
  setup_work_dir(argv[2]);
  CHECK_STATUS(shoal_set_log_callback(NULL, NULL, SHOAL_LOG_WARN), SHOAL_OK);

  test_version_and_names();
  test_misuse();
  test_dataset();
  test_unreachable();
  test_privacy_policy();
  test_federated_run();
  test_builtin_trainer();
  test_failing_callbacks();
  test_cancel();

  return finish_test("capi_test");
}
