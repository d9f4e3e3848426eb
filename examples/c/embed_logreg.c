/* A C application that joins a Shoal federation with its own model and training code, through
 * the C ABI only (shoal/shoal.h, libshoal.so). The model is logistic regression (logreg.h);
 * run the aggregator with --model linear:
 *
 *   shoal-aggregator --listen tcp://127.0.0.1:7070 --model linear --min-clients 2 --rounds 20
 *   embed_logreg_c --connect tcp://127.0.0.1:7070 --partition 0/2
 *   embed_logreg_c --connect tcp://127.0.0.1:7070 --partition 1/2 --poll
 *
 * --poll drives the client from this program's own loop (shoal_client_step) instead of
 * blocking in shoal_client_run. Build it against an installed Shoal with
 *   cc embed_logreg.c $(pkg-config --cflags --libs shoal) -lm
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logreg.h"
#include "shoal/shoal.h"

static void on_event(void* user, const shoal_event* e) {
  (void)user;
  if (e->kind == SHOAL_EVENT_ROUND_DONE)
    printf("round %llu: train_loss %.4f, %.2f s\n", (unsigned long long)e->round, e->train_loss, e->seconds);
  else if (e->kind == SHOAL_EVENT_FINISHED)
    printf("finished: %s\n", e->message);
  fflush(stdout);
}

static int usage(void) {
  fprintf(stderr,
          "usage: embed_logreg_c [--connect EP] [--partition i/n] [--dataset digits|csv:PATH] [--name NAME]\n"
          "                      [--secret-key FILE --server-key KEY_OR_FILE] [--poll]\n");
  return 2;
}

int main(int argc, char** argv) {
  const char *connect = "tcp://127.0.0.1:7070", *dataset = "digits", *name = NULL, *secret = NULL, *server = NULL;
  unsigned part = 0, parts = 1;
  int poll = 0;
  for (int i = 1; i < argc; ++i) {
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--poll")) {
      poll = 1;
      continue;
    }
    if (!v) return usage();
    if (!strcmp(argv[i], "--connect")) connect = v;
    else if (!strcmp(argv[i], "--dataset")) dataset = v;
    else if (!strcmp(argv[i], "--name")) name = v;
    else if (!strcmp(argv[i], "--secret-key")) secret = v;
    else if (!strcmp(argv[i], "--server-key")) server = v;
    else if (!strcmp(argv[i], "--partition")) {
      if (sscanf(v, "%u/%u", &part, &parts) != 2 || parts == 0 || part >= parts) return usage();
    } else {
      return usage();
    }
    ++i;
  }
  if (shoal_abi_version() != SHOAL_ABI_VERSION) {
    fprintf(stderr, "embed_logreg_c: built for Shoal ABI %d, loaded %d\n", SHOAL_ABI_VERSION, shoal_abi_version());
    return 1;
  }

  shoal_client_options options;
  shoal_client_options_init(&options, sizeof options);
  options.connect = connect;
  char default_name[64];
  snprintf(default_name, sizeof default_name, "logreg-c-%u", part);
  options.name = name ? name : default_name;
  options.secret_key_file = secret;
  options.server_key = server;
  options.on_event = on_event;
  shoal_client* client = NULL;
  if (shoal_client_create(&options, &client) != SHOAL_OK) {
    fprintf(stderr, "embed_logreg_c: error: %s\n", shoal_last_error());
    return 2;
  }
  logreg lr;
  memset(&lr, 0, sizeof lr);
  lr.dataset = dataset;
  lr.part = part;
  lr.parts = parts;
  shoal_trainer trainer = logreg_trainer(&lr, 0);
  shoal_status st = shoal_client_set_trainer(client, &trainer);
  if (st == SHOAL_OK && !poll) {
    st = shoal_client_run(client);
  } else if (st == SHOAL_OK) {
    /* The application's own loop: here it only counts its ticks; a real one would draw a
     * frame or serve its UI between steps. */
    unsigned long ticks = 0;
    int finished = 0;
    while (!finished) {
      st = shoal_client_step(client, 20, &finished);
      ++ticks;
    }
    printf("own loop: %lu ticks\n", ticks);
  }
  if (st != SHOAL_OK) fprintf(stderr, "embed_logreg_c: error: %s\n", shoal_client_last_error(client));
  shoal_client_destroy(client); /* calls logreg_destroy */
  return st == SHOAL_OK ? 0 : 1;
}
