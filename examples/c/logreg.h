/* logreg.h: an application's own model behind Shoal's C ABI. Multinomial logistic regression
 * written right here (forward, gradient and SGD by hand, no Shoal layers); Shoal only moves the
 * parameters. The layout matches the aggregator's `--model linear`: fc0.weight [dim, classes]
 * (row-major) then fc0.bias [classes], so the aggregator can evaluate the federated model.
 *
 * The training data is this client's part of a dataset, loaded with shoal_dataset_load at
 * configure() time with the task's seed and held-out fraction, so no client trains on the
 * aggregator's test examples. Used by embed_logreg.c and by the C ABI test. */
#ifndef SHOAL_EXAMPLES_LOGREG_H_
#define SHOAL_EXAMPLES_LOGREG_H_

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shoal/shoal.h"

typedef struct logreg {
  /* Set by the application before the run. */
  const char* dataset;  /* e.g. "digits" or "csv:PATH" */
  const char* data_dir; /* NULL: Shoal's default cache */
  uint32_t part, parts; /* this client's part i of n */
  /* Set at configure(). */
  shoal_dataset* data;
  size_t dim, classes, n_params;
  float* w; /* W (dim x classes), then b (classes) */
  uint32_t batch;
  uint64_t seed;
} logreg;

static uint64_t logreg_rand(uint64_t* s) { /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

/* Softmax probabilities of row x into p; returns the loss for label y. */
static double logreg_forward(const logreg* lr, const float* x, int32_t y, double* p) {
  double mx = -1e300, sum = 0.0;
  for (size_t c = 0; c < lr->classes; ++c) {
    double z = lr->w[lr->dim * lr->classes + c];
    for (size_t j = 0; j < lr->dim; ++j) z += (double)x[j] * lr->w[j * lr->classes + c];
    p[c] = z;
    if (z > mx) mx = z;
  }
  for (size_t c = 0; c < lr->classes; ++c) sum += (p[c] = exp(p[c] - mx));
  for (size_t c = 0; c < lr->classes; ++c) p[c] /= sum;
  return -log(p[y] > 1e-300 ? p[y] : 1e-300);
}

static void logreg_release(logreg* lr) {
  shoal_dataset_destroy(lr->data);
  free(lr->w);
  lr->data = NULL;
  lr->w = NULL;
}

static int logreg_configure(void* user, const shoal_task* task, char* error, size_t error_size) {
  logreg* lr = (logreg*)user;
  logreg_release(lr);
  if (shoal_dataset_load(lr->dataset, lr->data_dir, task->seed, task->test_fraction, lr->part, lr->parts, "iid",
                         &lr->data) != SHOAL_OK) {
    snprintf(error, error_size, "loading %s: %s", lr->dataset, shoal_last_error());
    return SHOAL_NOT_FOUND;
  }
  lr->dim = shoal_dataset_dim(lr->data);
  lr->classes = shoal_dataset_classes(lr->data);
  const shoal_tensor* t = task->tensors;
  if (task->num_tensors != 2 || strcmp(t[0].name, "fc0.weight") != 0 || t[0].rank != 2 ||
      t[0].shape[0] != (int64_t)lr->dim || t[0].shape[1] != (int64_t)lr->classes || t[1].rank != 1 ||
      t[1].shape[0] != (int64_t)lr->classes) {
    snprintf(error, error_size,
             "this application trains logistic regression (fc0.weight[%zu,%zu] fc0.bias[%zu]); the aggregator's "
             "model '%s' differs. Start the aggregator with --model linear",
             lr->dim, lr->classes, lr->classes, task->model);
    return SHOAL_INVALID_ARGUMENT;
  }
  lr->n_params = task->num_params;
  lr->w = (float*)calloc(lr->n_params, sizeof(float));
  if (!lr->w) {
    snprintf(error, error_size, "out of memory");
    return SHOAL_INTERNAL;
  }
  lr->batch = task->batch_size ? task->batch_size : 32;
  lr->seed = task->seed;
  return 0;
}

static int logreg_set_parameters(void* user, const float* params, size_t count, char* error, size_t error_size) {
  logreg* lr = (logreg*)user;
  if (count != lr->n_params) {
    snprintf(error, error_size, "got %zu parameters, the model has %zu", count, lr->n_params);
    return SHOAL_INVALID_ARGUMENT;
  }
  memcpy(lr->w, params, count * sizeof(float));
  return 0;
}

static int logreg_get_parameters(void* user, float* params, size_t count, char* error, size_t error_size) {
  logreg* lr = (logreg*)user;
  if (count != lr->n_params) {
    snprintf(error, error_size, "asked for %zu parameters, the model has %zu", count, lr->n_params);
    return SHOAL_INVALID_ARGUMENT;
  }
  memcpy(params, lr->w, count * sizeof(float));
  return 0;
}

/* Minibatch SGD for the round's epochs (or steps), reshuffling each epoch. */
static int logreg_train(void* user, const shoal_round* round, shoal_train_context* ctx, uint64_t* num_examples,
                        double* train_loss, char* error, size_t error_size) {
  logreg* lr = (logreg*)user;
  const size_t n = shoal_dataset_rows(lr->data), d = lr->dim, k = lr->classes;
  const float* xs = shoal_dataset_features(lr->data);
  const int32_t* ys = shoal_dataset_labels(lr->data);
  size_t* order = (size_t*)malloc(n * sizeof(size_t));
  float* grad = (float*)malloc(lr->n_params * sizeof(float));
  double* p = (double*)malloc(k * sizeof(double));
  if (!order || !grad || !p || n == 0) {
    free(order), free(grad), free(p);
    snprintf(error, error_size, n == 0 ? "no local examples" : "out of memory");
    return SHOAL_INTERNAL;
  }
  for (size_t i = 0; i < n; ++i) order[i] = i;
  uint64_t rng = lr->seed * 7919u + round->round * 104729u + lr->part + 1;
  const size_t per_epoch = (n + lr->batch - 1) / lr->batch;
  const size_t total = round->local_steps ? round->local_steps : per_epoch * round->local_epochs;
  double loss = 0.0;
  uint64_t seen = 0;
  for (size_t step = 0; step < total; ++step) {
    if (shoal_train_cancelled(ctx)) {
      free(order), free(grad), free(p);
      snprintf(error, error_size, "cancelled");
      return SHOAL_CANCELLED;
    }
    if (step % per_epoch == 0)
      for (size_t i = n - 1; i > 0; --i) {
        const size_t j = (size_t)(logreg_rand(&rng) % (i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
      }
    const size_t begin = (step % per_epoch) * lr->batch, end = begin + lr->batch < n ? begin + lr->batch : n;
    memset(grad, 0, lr->n_params * sizeof(float));
    for (size_t r = begin; r < end; ++r) {
      const float* x = xs + order[r] * d;
      const int32_t y = ys[order[r]];
      loss += logreg_forward(lr, x, y, p);
      for (size_t c = 0; c < k; ++c) { /* dL/dz = softmax - onehot; dW = x dz; db = dz */
        const float dz = (float)(p[c] - (c == (size_t)y ? 1.0 : 0.0));
        for (size_t j = 0; j < d; ++j) grad[j * k + c] += x[j] * dz;
        grad[d * k + c] += dz;
      }
    }
    const float scale = round->learning_rate / (float)(end - begin);
    for (size_t i = 0; i < lr->n_params; ++i) lr->w[i] -= scale * grad[i];
    seen += end - begin;
    shoal_train_progress(ctx, (float)(step + 1) / (float)total);
  }
  free(order), free(grad), free(p);
  *num_examples = seen;
  *train_loss = seen ? loss / (double)seen : NAN;
  return 0;
}

/* Loss and accuracy of the current parameters on the local data. */
static int logreg_evaluate(void* user, double* loss, double* accuracy, uint64_t* num_examples, char* error,
                           size_t error_size) {
  logreg* lr = (logreg*)user;
  const size_t n = shoal_dataset_rows(lr->data);
  double* p = (double*)malloc(lr->classes * sizeof(double));
  if (!p) {
    snprintf(error, error_size, "out of memory");
    return SHOAL_INTERNAL;
  }
  double total = 0.0;
  size_t right = 0;
  for (size_t r = 0; r < n; ++r) {
    const int32_t y = shoal_dataset_labels(lr->data)[r];
    total += logreg_forward(lr, shoal_dataset_features(lr->data) + r * lr->dim, y, p);
    size_t best = 0;
    for (size_t c = 1; c < lr->classes; ++c)
      if (p[c] > p[best]) best = c;
    right += best == (size_t)y;
  }
  free(p);
  *loss = n ? total / (double)n : 0.0;
  *accuracy = n ? (double)right / (double)n : 0.0;
  *num_examples = n;
  return 0;
}

static void logreg_destroy(void* user) { logreg_release((logreg*)user); }

/* The callbacks, ready for shoal_client_set_trainer. */
static shoal_trainer logreg_trainer(logreg* lr, uint64_t num_examples) {
  shoal_trainer t;
  memset(&t, 0, sizeof t);
  t.version = SHOAL_TRAINER_VERSION;
  t.user = lr;
  t.name = "logreg-c";
  t.num_examples = num_examples;
  t.configure = logreg_configure;
  t.set_parameters = logreg_set_parameters;
  t.get_parameters = logreg_get_parameters;
  t.train = logreg_train;
  t.evaluate = logreg_evaluate;
  t.destroy = logreg_destroy;
  return t;
}

#endif /* SHOAL_EXAMPLES_LOGREG_H_ */
