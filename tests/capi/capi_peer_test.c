/* The C ABI's serverless peers (shoal_peer_*), compiled as C11: three peers in this process,
 * one thread each over loopback TCP, train the application's own logistic regression
 * (examples/c/logreg.h) in allgather mode. Every replica is bit-identical at every step (the
 * step callback's hashes and parameters), the loss of the shared model falls, and the
 * trainer is driven as shoal.h says (one step of lr 1, keep_optimizer_state set). A founding
 * peer with no step limit stops on shoal_peer_stop from another thread; misuse is answered by
 * a status and a message. Also run under ASan/UBSan by scripts/test.
 *
 *   capi_peer_test WORK_DIR
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "capi_common.h"

enum { kPeers = 3, kSteps = 25, kMaxSteps = 64, kDim = 8, kClasses = 4, kParams = kDim * kClasses + kClasses };

static const int64_t kWeightShape[] = {kDim, kClasses};
static const int64_t kBiasShape[] = {kClasses};
static const shoal_tensor kLayout[] = {
    {"fc0.weight", 0, kDim * kClasses, 2, kWeightShape},
    {"fc0.bias", kDim * kClasses, kClasses, 1, kBiasShape},
};

/* One peer's run: its trainer (logreg.h, wrapped to record how it is driven) and what its
 * step callback saw. */
typedef struct peer_run {
  logreg lr;
  char name[16], endpoint[64], bootstrap[64], metrics[512];
  uint64_t steps;  /* 0: until stopped */
  shoal_status status;
  char error[512];
  /* Seen by the trainer. */
  float lr_seen;
  uint32_t local_steps_seen, keep_state_seen, round_size_ok;
  int trainer_destroyed;
  /* Seen by the step callback. */
  uint64_t last_step;
  char hashes[kMaxSteps + 1][65];
  float params[kParams];
  double first_loss, last_loss;
  atomic_int steps_seen;
  int overlap;
} peer_run;

static int recording_train(void* user, const shoal_round* round, shoal_train_context* ctx, uint64_t* num_examples,
                           double* train_loss, char* error, size_t error_size) {
  peer_run* r = (peer_run*)user;
  r->lr_seen = round->learning_rate;
  r->local_steps_seen = round->local_steps;
  r->round_size_ok = round->struct_size >= offsetof(shoal_round, keep_optimizer_state) + sizeof(uint32_t);
  r->keep_state_seen = r->round_size_ok ? round->keep_optimizer_state : 0;
  return logreg_train(&r->lr, round, ctx, num_examples, train_loss, error, error_size);
}
static int fwd_configure(void* u, const shoal_task* t, char* e, size_t n) { return logreg_configure(&((peer_run*)u)->lr, t, e, n); }
static int fwd_set(void* u, const float* p, size_t c, char* e, size_t n) { return logreg_set_parameters(&((peer_run*)u)->lr, p, c, e, n); }
static int fwd_get(void* u, float* p, size_t c, char* e, size_t n) { return logreg_get_parameters(&((peer_run*)u)->lr, p, c, e, n); }
static int fwd_evaluate(void* u, double* l, double* a, uint64_t* n, char* e, size_t s) {
  return logreg_evaluate(&((peer_run*)u)->lr, l, a, n, e, s);
}
static void fwd_destroy(void* u) {
  peer_run* r = (peer_run*)u;
  logreg_release(&r->lr);
  r->trainer_destroyed = 1;
}

static void on_step(void* user, const shoal_peer_step* s) {
  peer_run* r = (peer_run*)user;
  CHECK(s->struct_size == sizeof *s && s->model_hash != NULL && s->params != NULL);
  CHECK(s->num_params == kParams);
  CHECK(s->step == r->last_step + 1 || r->last_step == 0);
  r->last_step = s->step;
  if (s->step <= kMaxSteps) snprintf(r->hashes[s->step], sizeof r->hashes[s->step], "%s", s->model_hash);
  if (s->num_params == kParams) memcpy(r->params, s->params, sizeof r->params);
  if (isfinite(s->train_loss)) {
    if (r->first_loss == 0.0) r->first_loss = s->train_loss;
    r->last_loss = s->train_loss;
  }
  ++r->steps_seen;
}

static void* run_peer(void* arg) {
  peer_run* r = (peer_run*)arg;
  shoal_peer_options o;
  CHECK_STATUS(shoal_peer_options_init(&o, sizeof o), SHOAL_OK);
  o.name = r->name;
  o.listen = r->endpoint;
  o.bootstrap = r->bootstrap[0] ? r->bootstrap : NULL;
  o.mode = "allgather";
  o.model = "logreg-c";
  o.tensors = kLayout;
  o.num_tensors = 2;
  o.optimizer = "sgd";
  o.learning_rate = 0.5f;
  o.momentum = 0.5f;
  o.batch_size = 16;
  o.seed = 5;
  o.steps = r->steps;
  o.min_peers = r->steps ? kPeers : 1;
  o.heartbeat_interval_ms = 100;
  o.step_timeout_ms = 3000;
  o.join_timeout_ms = 20000;
  o.eval_every = 0;
  o.metrics_out = r->metrics;
  o.on_step = on_step;
  o.step_user = r;
  o.overlap = r->overlap;
  shoal_peer* p = NULL;
  r->status = shoal_peer_create(&o, &p);
  if (r->status != SHOAL_OK) {
    snprintf(r->error, sizeof r->error, "%s", shoal_last_error());
    return NULL;
  }
  shoal_trainer t = logreg_trainer(&r->lr, 100);
  t.user = r;
  t.configure = fwd_configure;
  t.set_parameters = fwd_set;
  t.get_parameters = fwd_get;
  t.train = recording_train;
  t.evaluate = fwd_evaluate;
  t.destroy = fwd_destroy;
  CHECK_STATUS(shoal_peer_set_trainer(p, &t), SHOAL_OK);
  r->status = shoal_peer_run(p);
  snprintf(r->error, sizeof r->error, "%s", shoal_peer_last_error(p));
  CHECK_STATUS(shoal_peer_run(p), SHOAL_FAILED_PRECONDITION); /* once per peer */
  CHECK(strstr(shoal_peer_last_error(p), "create a new peer") != NULL);
  shoal_peer_destroy(p);
  return NULL;
}

static void init_run(peer_run* r, const char* name, uint32_t part, uint32_t parts, uint64_t steps) {
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", name);
  snprintf(r->endpoint, sizeof r->endpoint, "tcp://127.0.0.1:%d", free_port());
  snprintf(r->metrics, sizeof r->metrics, "%s/%s.jsonl", g_dir, name);
  r->lr.dataset = g_csv_spec;
  r->lr.part = part;
  r->lr.parts = parts;
  r->steps = steps;
}

/* overlap: each step's update from the replica one step older; the same checks hold. */
static void test_allgather_swarm(int overlap) {
  static peer_run runs[kPeers];
  pthread_t threads[kPeers];
  for (int i = 0; i < kPeers; ++i) {
    char name[16];
    snprintf(name, sizeof name, overlap ? "o%d" : "p%d", i);
    init_run(&runs[i], name, (uint32_t)i, kPeers, kSteps);
    runs[i].overlap = overlap;
    if (i > 0) snprintf(runs[i].bootstrap, sizeof runs[i].bootstrap, "%s", runs[0].endpoint);
    pthread_create(&threads[i], NULL, run_peer, &runs[i]);
    if (i == 0) sleep_ms(300); /* the founder binds first */
  }
  for (int i = 0; i < kPeers; ++i) pthread_join(threads[i], NULL);
  for (int i = 0; i < kPeers; ++i) {
    peer_run* r = &runs[i];
    if (r->status != SHOAL_OK) fprintf(stderr, "peer %s: %s: %s\n", r->name, shoal_status_name(r->status), r->error);
    CHECK(r->status == SHOAL_OK);
    CHECK(r->last_step == kSteps);
    CHECK(r->trainer_destroyed == 1);
    /* allgather: one plain SGD step of learning rate 1 (the delta is minus the gradient). */
    CHECK(r->lr_seen == 1.0f && r->local_steps_seen == 1);
    CHECK(r->round_size_ok && r->keep_state_seen == 1);
  }
  /* One model: every step's hash, and the final parameters, bit for bit. */
  int common = 0;
  for (int step = 1; step <= kSteps; ++step) {
    int everywhere = 1;
    for (int i = 0; i < kPeers; ++i) everywhere &= runs[i].hashes[step][0] != '\0';
    if (!everywhere) continue;
    ++common;
    for (int i = 1; i < kPeers; ++i) CHECK(strcmp(runs[i].hashes[step], runs[0].hashes[step]) == 0);
  }
  CHECK(common >= kSteps - 1);
  for (int i = 1; i < kPeers; ++i) CHECK(memcmp(runs[i].params, runs[0].params, sizeof runs[0].params) == 0);
  /* It learned: the training loss of the included updates fell from ln 4 = 1.39. */
  CHECK(runs[0].first_loss > 1.0 && runs[0].last_loss < 0.5 * runs[0].first_loss);
  if (!(runs[0].last_loss < 0.5 * runs[0].first_loss))
    fprintf(stderr, "train loss %.4f -> %.4f\n", runs[0].first_loss, runs[0].last_loss);
  /* The metrics file has a line per step, naming the same hash as the callback. */
  FILE* f = fopen(runs[0].metrics, "r");
  CHECK(f != NULL);
  if (f) {
    char line[8192], want[128];
    int lines = 0, found = 0;
    snprintf(want, sizeof want, "\"model_hash\":\"%s\"", runs[0].hashes[kSteps]);
    while (fgets(line, sizeof line, f)) ++lines, found |= strstr(line, want) != NULL;
    fclose(f);
    CHECK(lines == kSteps && found);
  }
}

typedef struct solo_run {
  shoal_peer* peer;
  shoal_status status;
} solo_run;

static void* run_solo(void* arg) {
  solo_run* s = (solo_run*)arg;
  s->status = shoal_peer_run(s->peer);
  return NULL;
}

/* A founding peer alone, with no step limit, trains until another thread (as a signal handler
 * would) calls shoal_peer_stop; the run then returns SHOAL_OK. */
static void test_stop(void) {
  static peer_run r;
  init_run(&r, "solo", 0, 1, 0);
  shoal_peer_options o;
  CHECK_STATUS(shoal_peer_options_init(&o, sizeof o), SHOAL_OK);
  o.name = r.name;
  o.listen = r.endpoint;
  o.model = "logreg-c";
  o.tensors = kLayout;
  o.num_tensors = 2;
  o.on_step = on_step;
  o.step_user = &r;
  solo_run s = {NULL, SHOAL_INTERNAL};
  CHECK_STATUS(shoal_peer_create(&o, &s.peer), SHOAL_OK);
  if (!s.peer) return;
  shoal_trainer t = logreg_trainer(&r.lr, 100);
  CHECK_STATUS(shoal_peer_set_trainer(s.peer, &t), SHOAL_OK);
  pthread_t runner;
  pthread_create(&runner, NULL, run_solo, &s);
  for (int i = 0; i < 2000 && atomic_load(&r.steps_seen) < 3; ++i) sleep_ms(10);
  CHECK(atomic_load(&r.steps_seen) >= 3);
  CHECK_STATUS(shoal_peer_stop(s.peer), SHOAL_OK);
  pthread_join(runner, NULL);
  CHECK_STATUS(s.status, SHOAL_OK);
  shoal_peer_destroy(s.peer);
}

static void test_misuse(void) {
  shoal_peer_options o;
  CHECK_STATUS(shoal_peer_options_init(NULL, sizeof o), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_peer_options_init(&o, sizeof o + 8), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("shoal_peer_options.struct_size");
  CHECK_STATUS(shoal_peer_options_init(&o, sizeof o), SHOAL_OK);
  CHECK(o.struct_size == sizeof o && strcmp(o.mode, "allgather") == 0 && o.min_peers == 1 && o.heartbeat_timeout_ms > 0);
  shoal_peer* p = (shoal_peer*)&o; /* overwritten with NULL on failure */
  CHECK_STATUS(shoal_peer_create(NULL, &p), SHOAL_INVALID_ARGUMENT);
  CHECK(p == NULL);
  CHECK_STATUS(shoal_peer_create(&o, NULL), SHOAL_INVALID_ARGUMENT);

  /* A layout that is not packed in order, and parameters that do not fit it. */
  shoal_tensor bad[2];
  memcpy(bad, kLayout, sizeof bad);
  bad[1].offset = 0;
  o.tensors = bad;
  o.num_tensors = 2;
  CHECK_STATUS(shoal_peer_create(&o, &p), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("tensors[1] (fc0.bias)");
  o.tensors = kLayout;
  float init[3] = {0};
  o.initial_params = init;
  o.num_initial_params = 3;
  CHECK_STATUS(shoal_peer_create(&o, &p), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("num_initial_params is 3");
  o.tensors = NULL;  /* without a layout (the built-in model's) RunPeer checks the size */
  o.num_tensors = 0;
  CHECK_STATUS(shoal_peer_create(&o, &p), SHOAL_OK);
  shoal_peer_destroy(p);
  o.tensors = kLayout;
  o.num_tensors = 2;
  o.initial_params = NULL;
  o.num_initial_params = 0;
  o.heartbeat_timeout_ms = o.heartbeat_interval_ms;
  CHECK_STATUS(shoal_peer_create(&o, &p), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("heartbeat_timeout_ms");
  CHECK_STATUS(shoal_peer_options_init(&o, sizeof o), SHOAL_OK);

  /* A peer without a trainer, or with a trainer that lacks callbacks. */
  CHECK_STATUS(shoal_peer_create(&o, &p), SHOAL_OK);
  CHECK_STATUS(shoal_peer_run(p), SHOAL_FAILED_PRECONDITION);
  CHECK(strstr(shoal_peer_last_error(p), "no trainer") != NULL);
  logreg lr;
  memset(&lr, 0, sizeof lr);
  shoal_trainer t = logreg_trainer(&lr, 1);
  t.train = NULL;
  CHECK_STATUS(shoal_peer_set_trainer(p, &t), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("lacks required callbacks: train");
  t = logreg_trainer(&lr, 1);
  t.version = 99;
  CHECK_STATUS(shoal_peer_set_trainer(p, &t), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_peer_set_trainer(p, NULL), SHOAL_INVALID_ARGUMENT);
  shoal_builtin_options b;
  CHECK_STATUS(shoal_builtin_options_init(&b, sizeof b), SHOAL_OK);
  b.partition_index = 2;
  b.partition_count = 2;
  CHECK_STATUS(shoal_peer_use_builtin_trainer(p, &b), SHOAL_INVALID_ARGUMENT);
  CHECK(strstr(shoal_peer_last_error(p), "partition_index 2") != NULL);
  shoal_peer_destroy(p);

  /* NULL handles. */
  CHECK_STATUS(shoal_peer_set_trainer(NULL, &t), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("peer is NULL");
  CHECK_STATUS(shoal_peer_use_builtin_trainer(NULL, &b), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_peer_run(NULL), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_peer_stop(NULL), SHOAL_INVALID_ARGUMENT);
  CHECK(strstr(shoal_peer_last_error(NULL), "NULL") != NULL);
  shoal_peer_destroy(NULL);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: capi_peer_test WORK_DIR\n");
    return 2;
  }
  setup_work_dir(argv[1]);
  CHECK_STATUS(shoal_set_log_callback(NULL, NULL, SHOAL_LOG_WARN), SHOAL_OK);

  test_misuse();
  test_allgather_swarm(0);
  test_allgather_swarm(1);
  test_stop();

  return finish_test("capi_peer_test");
}
