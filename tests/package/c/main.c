/* A separate C project built against an installed Shoal (find_package or pkg-config). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <shoal/shoal.h>

int main(void) {
  /* A trainer computes losses with libm, as the examples do: the README's one-line
   * `cc app.c $(pkg-config --cflags --libs shoal)` links it because shoal.pc carries -lm. */
  volatile double z = 0.5;
  if (!(exp(z) > 1.0)) return 1;
  if (shoal_abi_version() != SHOAL_ABI_VERSION) {
    fprintf(stderr, "header ABI %d, library ABI %d\n", SHOAL_ABI_VERSION, shoal_abi_version());
    return 1;
  }
  shoal_client_options o;
  shoal_client_options_init(&o, sizeof o);
  shoal_client* c = NULL;
  if (shoal_client_create(&o, &c) != SHOAL_OK) return 1;
  /* Misuse answered with a status and a message, across the installed library. */
  if (shoal_client_run(c) != SHOAL_FAILED_PRECONDITION || strlen(shoal_client_last_error(c)) == 0) return 1;
  shoal_client_destroy(c);
  printf("shoal %s, ABI %d: ok\n", shoal_version(), shoal_abi_version());
  return 0;
}
