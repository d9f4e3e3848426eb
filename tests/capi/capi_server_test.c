/* The C ABI's aggregator (shoal_server_*), compiled as C11: an application runs the
 * aggregator in its own process, from its own loop (shoal_server_step), with its own
 * evaluator: the logistic regression of examples/c/logreg.h scoring each round's global model
 * on the whole training split. Two clients (threads, shoal_client_* with the same
 * application trainer) join over loopback TCP. Checked: every round is reported once, in
 * order, with the evaluator's own loss and accuracy; the evaluator's metrics reach the
 * metrics file; a round whose evaluation fails is still committed and counted; accuracy
 * rises; a server with no round limit stops on shoal_server_stop (and on shoal_server_finish)
 * from another thread; misuse
 * is answered by a status and a message. Also run under ASan/UBSan by scripts/test.
 *
 *   capi_server_test WORK_DIR
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

enum { kRounds = 6, kFailingRound = 3 };

/* The application's evaluator: logreg.h over the training split, and what it saw. */
typedef struct evaluator_state {
  logreg lr;
  int configured, destroyed, calls;
  uint64_t rounds_seen[16];
  double loss[16], accuracy[16];
  size_t count_seen;
} evaluator_state;

static int eval_configure(void* user, const shoal_task* task, char* error, size_t error_size) {
  evaluator_state* e = (evaluator_state*)user;
  ++e->configured;
  return logreg_configure(&e->lr, task, error, error_size);
}

static int eval_evaluate(void* user, uint64_t round, const float* params, size_t count, shoal_eval_context* context,
                         double* loss, double* accuracy, char* error, size_t error_size) {
  evaluator_state* e = (evaluator_state*)user;
  if (e->calls < 16) e->rounds_seen[e->calls] = round;
  ++e->calls;
  e->count_seen = count;
  if (round == kFailingRound) {
    snprintf(error, error_size, "the evaluation data is unavailable this round");
    return SHOAL_UNAVAILABLE;
  }
  int rc = logreg_set_parameters(&e->lr, params, count, error, error_size);
  if (rc != 0) return rc;
  uint64_t n = 0;
  rc = logreg_evaluate(&e->lr, loss, accuracy, &n, error, error_size);
  if (rc != 0) return rc;
  if (round < 16) {
    e->loss[round] = *loss;
    e->accuracy[round] = *accuracy;
  }
  CHECK_STATUS(shoal_eval_metric(context, "examples", (double)n), SHOAL_OK);
  CHECK_STATUS(shoal_eval_metric(context, NULL, 1.0), SHOAL_INVALID_ARGUMENT);
  return 0;
}

static void eval_destroy(void* user) {
  evaluator_state* e = (evaluator_state*)user;
  ++e->destroyed;
  logreg_release(&e->lr);
}

static shoal_evaluator make_evaluator(evaluator_state* e) {
  shoal_evaluator ev;
  memset(&ev, 0, sizeof ev);
  ev.version = SHOAL_EVALUATOR_VERSION;
  ev.user = e;
  ev.configure = eval_configure;
  ev.evaluate = eval_evaluate;
  ev.destroy = eval_destroy;
  return ev;
}

/* What on_round saw. */
typedef struct rounds_seen {
  int reports;
  uint64_t round[16];
  double test_loss[16], test_accuracy[16];
  uint64_t evaluations_failed[16];
  int model_updated[16];
  char hash[16][65];
} rounds_seen;

static void on_round(void* user, const shoal_round_report* r) {
  rounds_seen* s = (rounds_seen*)user;
  CHECK(r->struct_size == sizeof *r && r->model_hash != NULL && strlen(r->model_hash) == 64);
  const int i = s->reports++;
  if (i >= 16) return;
  s->round[i] = r->round;
  s->test_loss[i] = r->test_loss;
  s->test_accuracy[i] = r->test_accuracy;
  s->evaluations_failed[i] = r->evaluations_failed;
  s->model_updated[i] = r->model_updated;
  snprintf(s->hash[i], sizeof s->hash[i], "%s", r->model_hash);
  CHECK(r->clients_reported == 2 && r->clients_selected == 2);
}

typedef struct client_run {
  char endpoint[128], name[16];
  uint32_t part;
  shoal_status status;
} client_run;

static void* run_client(void* arg) {
  client_run* r = (client_run*)arg;
  shoal_client_options o;
  CHECK_STATUS(shoal_client_options_init(&o, sizeof o), SHOAL_OK);
  o.connect = r->endpoint;
  o.name = r->name;
  shoal_client* c = NULL;
  r->status = shoal_client_create(&o, &c);
  if (r->status != SHOAL_OK) return NULL;
  logreg lr;
  memset(&lr, 0, sizeof lr);
  lr.dataset = g_csv_spec;
  lr.part = r->part;
  lr.parts = 2;
  shoal_trainer t = logreg_trainer(&lr, 200);
  r->status = shoal_client_set_trainer(c, &t);
  if (r->status == SHOAL_OK) r->status = shoal_client_run(c);
  shoal_client_destroy(c);
  return NULL;
}

static void base_options(shoal_server_options* o) {
  CHECK_STATUS(shoal_server_options_init(o, sizeof *o), SHOAL_OK);
  o->listen = "tcp://127.0.0.1:0";
  o->model = "linear";
  o->dataset = g_csv_spec;
  o->standardize = "off"; /* the applications' trainers read the CSV as written */
  o->seed = 3;
  o->learning_rate = 0.5f;
  o->momentum = 0.0f;
  o->min_clients = 2;
}

static void test_misuse(void) {
  shoal_server_options o;
  CHECK_STATUS(shoal_server_options_init(NULL, sizeof o), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_server_options_init(&o, 8), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("shoal_server_options");
  shoal_server* s = (shoal_server*)1;
  CHECK_STATUS(shoal_server_create(NULL, &s), SHOAL_INVALID_ARGUMENT);
  CHECK(s == NULL);
  base_options(&o);
  CHECK_STATUS(shoal_server_create(&o, NULL), SHOAL_INVALID_ARGUMENT);
  o.fraction = 2.0;
  CHECK_STATUS(shoal_server_create(&o, &s), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("--fraction");
  base_options(&o);
  o.dataset = "csv:/nonexistent/shoal.csv";
  CHECK(shoal_server_create(&o, &s) != SHOAL_OK && s == NULL);
  CHECK_ERROR_MENTIONS("/nonexistent/shoal.csv");
  /* Not on loopback and no keys: refused, saying what to do. */
  base_options(&o);
  o.listen = "tcp://0.0.0.0:0";
  CHECK_STATUS(shoal_server_create(&o, &s), SHOAL_FAILED_PRECONDITION);
  CHECK_ERROR_MENTIONS("not a loopback address");

  CHECK_STATUS(shoal_server_run(NULL), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_server_stop(NULL), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_server_finish(NULL), SHOAL_INVALID_ARGUMENT);
  CHECK_STATUS(shoal_server_set_evaluator(NULL, NULL), SHOAL_INVALID_ARGUMENT);
  int finished = 0;
  CHECK_STATUS(shoal_server_step(NULL, 0, &finished), SHOAL_INVALID_ARGUMENT);
  CHECK(shoal_server_endpoint(NULL) == NULL);
  CHECK(strstr(shoal_server_last_error(NULL), "NULL") != NULL);
  shoal_server_destroy(NULL);

  base_options(&o);
  CHECK_STATUS(shoal_server_create(&o, &s), SHOAL_OK);
  CHECK(s != NULL && strncmp(shoal_server_endpoint(s), "tcp://127.0.0.1:", 16) == 0);
  CHECK_STATUS(shoal_server_step(s, 0, NULL), SHOAL_INVALID_ARGUMENT);
  CHECK(strstr(shoal_server_last_error(s), "finished") != NULL);
  evaluator_state e;
  memset(&e, 0, sizeof e);
  shoal_evaluator ev = make_evaluator(&e);
  ev.version = 99;
  CHECK_STATUS(shoal_server_set_evaluator(s, &ev), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("SHOAL_EVALUATOR_VERSION");
  ev = make_evaluator(&e);
  ev.evaluate = NULL;
  CHECK_STATUS(shoal_server_set_evaluator(s, &ev), SHOAL_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("evaluate");
  /* Once it has served, the evaluator can no longer change, and `user` stays the caller's. */
  CHECK_STATUS(shoal_server_step(s, 0, &finished), SHOAL_OK);
  CHECK(finished == 0);
  ev = make_evaluator(&e);
  CHECK_STATUS(shoal_server_set_evaluator(s, &ev), SHOAL_FAILED_PRECONDITION);
  CHECK(strstr(shoal_server_last_error(s), "SetEvaluator") != NULL);
  CHECK_STATUS(shoal_server_run(s), SHOAL_FAILED_PRECONDITION);
  shoal_server_destroy(s);
  CHECK(e.configured == 0 && e.destroyed == 0);
}

/* The whole federation from C: the server stepped from this thread, two clients. */
static void test_federation_with_own_evaluator(void) {
  char metrics[600];
  snprintf(metrics, sizeof metrics, "%s/server.jsonl", g_dir);
  remove(metrics);
  rounds_seen seen;
  memset(&seen, 0, sizeof seen);
  shoal_server_options o;
  base_options(&o);
  o.rounds = kRounds;
  o.metrics_out = metrics;
  o.on_round = on_round;
  o.round_user = &seen;
  shoal_server* s = NULL;
  CHECK_STATUS(shoal_server_create(&o, &s), SHOAL_OK);
  if (!s) return;
  evaluator_state e;
  memset(&e, 0, sizeof e);
  e.lr.dataset = g_csv_spec;
  e.lr.part = 0;
  e.lr.parts = 1;
  shoal_evaluator ev = make_evaluator(&e);
  CHECK_STATUS(shoal_server_set_evaluator(s, &ev), SHOAL_OK);

  client_run runs[2];
  pthread_t threads[2];
  memset(runs, 0, sizeof runs);
  for (int i = 0; i < 2; ++i) {
    snprintf(runs[i].endpoint, sizeof runs[i].endpoint, "%s", shoal_server_endpoint(s));
    snprintf(runs[i].name, sizeof runs[i].name, "c%d", i);
    runs[i].part = (uint32_t)i;
    pthread_create(&threads[i], NULL, run_client, &runs[i]);
  }
  int finished = 0, steps = 0;
  shoal_status st = SHOAL_OK;
  while (!finished && steps < 120000) {
    st = shoal_server_step(s, 1, &finished);
    ++steps;
  }
  CHECK_STATUS(st, SHOAL_OK);
  CHECK(finished == 1 && steps > 1);
  if (!(finished == 1 && steps > 1)) fprintf(stderr, "finished %d after %d steps\n", finished, steps);
  /* Over: a later step answers the same. */
  int again = 0;
  CHECK_STATUS(shoal_server_step(s, 0, &again), SHOAL_OK);
  CHECK(again == 1);
  for (int i = 0; i < 2; ++i) {
    pthread_join(threads[i], NULL);
    CHECK_STATUS(runs[i].status, SHOAL_OK);
  }

  CHECK(e.configured == 1 && e.calls == kRounds);
  CHECK(e.count_seen == 8 * 4 + 4); /* the layout's floats: fc0.weight[8,4], fc0.bias[4] */
  CHECK(seen.reports == kRounds);
  for (int i = 0; i < kRounds && i < seen.reports; ++i) {
    const uint64_t round = (uint64_t)i + 1;
    CHECK(e.rounds_seen[i] == round && seen.round[i] == round);
    CHECK(seen.model_updated[i]);
    if (i > 0) CHECK(strcmp(seen.hash[i], seen.hash[i - 1]) != 0);
    if (round == kFailingRound) {
      CHECK(seen.test_loss[i] == 0.0 && seen.test_accuracy[i] == 0.0);
    } else {
      /* The report carries exactly what the evaluator computed. */
      CHECK(seen.test_loss[i] == e.loss[round] && seen.test_accuracy[i] == e.accuracy[round]);
    }
    CHECK(seen.evaluations_failed[i] == (round >= kFailingRound ? 1u : 0u));
  }
  /* The blobs are well separated: the federated model classifies them. */
  CHECK(e.accuracy[kRounds] > 0.9 && e.loss[kRounds] < e.loss[1]);

  /* The metrics file: one line per round, with the evaluator's own metric and the count. */
  FILE* f = fopen(metrics, "r");
  CHECK(f != NULL);
  if (f) {
    char line[8192];
    int lines = 0, with_examples = 0, failed_counted = 0;
    while (fgets(line, sizeof line, f)) {
      ++lines;
      if (strstr(line, "\"eval_examples\":")) ++with_examples;
      if (strstr(line, "\"evaluations_failed\":1")) ++failed_counted;
    }
    fclose(f);
    CHECK(lines == kRounds && with_examples == kRounds - 1 && failed_counted == kRounds - kFailingRound + 1);
  }
  shoal_server_destroy(s);
  CHECK(e.destroyed == 1);
}

typedef struct stopper {
  shoal_server* server;
  int finish; /* shoal_server_finish instead of shoal_server_stop */
} stopper;

static void* stop_soon(void* arg) {
  stopper* k = (stopper*)arg;
  sleep_ms(300);
  CHECK_STATUS(k->finish ? shoal_server_finish(k->server) : shoal_server_stop(k->server), SHOAL_OK);
  return NULL;
}

/* No round limit and no clients: shoal_server_run returns OK once another thread stops or
 * finishes it. */
static void test_stop(int finish) {
  shoal_server_options o;
  base_options(&o);
  shoal_server* s = NULL;
  CHECK_STATUS(shoal_server_create(&o, &s), SHOAL_OK);
  if (!s) return;
  stopper k = {s, finish};
  pthread_t th;
  pthread_create(&th, NULL, stop_soon, &k);
  CHECK_STATUS(shoal_server_run(s), SHOAL_OK);
  pthread_join(th, NULL);
  shoal_server_destroy(s);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: capi_server_test WORK_DIR\n");
    return 2;
  }
  setup_work_dir(argv[1]);
  CHECK_STATUS(shoal_set_log_callback(NULL, NULL, SHOAL_LOG_ERROR), SHOAL_OK);
  CHECK(shoal_abi_version() == SHOAL_ABI_VERSION && SHOAL_ABI_VERSION == 3);

  test_misuse();
  test_federation_with_own_evaluator();
  test_stop(0);
  test_stop(1);

  return finish_test("capi_server_test");
}
