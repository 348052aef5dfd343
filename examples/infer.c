/* infer.c - classifies one 8x8 digit with the digits model of a running
 * gpusrv daemon, through the C client library.
 *
 *   cc infer.c $(pkg-config --cflags --libs gpusrv-client) -o infer
 *   ./infer [URL] [MODEL]          (defaults: GPUSRV_URL or :8000, digits)
 *
 * Reads 64 pixel values (0-16) from standard input, or uses a drawn "0"
 * when there are none, and prints each class's probability and the winner. */
#include <gpusrv/client.h>

#include <stdio.h>

static const float zero[64] = {
    0, 0, 5, 13, 9, 1, 0, 0, 0, 0, 13, 15, 10, 15, 5, 0, 0, 3, 15, 2, 0, 11, 8, 0,
    0, 4, 12, 0, 0, 8, 8, 0, 0, 5, 8, 0, 0, 9, 8, 0, 0, 4, 11, 0, 1, 12, 7, 0,
    0, 2, 14, 5, 10, 12, 0, 0, 0, 0, 6, 13, 10, 0, 0, 0};

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : NULL, *model = argc > 2 ? argv[2] : "digits";
  float pixels[64], probs[10];
  int n = 0;
  while (n < 64 && scanf("%f", &pixels[n]) == 1)
    n++;
  if (n != 64)
    for (int i = 0; i < 64; i++)
      pixels[i] = zero[i];

  gs_client *client;
  if (gs_client_open(url, NULL, &client) != GS_OK) {
    fprintf(stderr, "infer: %s\n", gs_client_last_error(NULL));
    return 1;
  }
  /* The pixels are sent from where they are; the answer lands in probs. */
  gs_client_tensor in = {.name = "pixels", .datatype = "FP32", .rank = 2, .shape = {1, 64},
                         .data = pixels, .bytes = sizeof pixels};
  gs_client_tensor out = {.name = "probs", .data = probs, .bytes = sizeof probs};
  int rc = gs_client_infer(client, model, NULL, &in, 1, &out, 1);
  if (rc != GS_OK) {
    fprintf(stderr, "infer: %s\n", gs_client_last_error(client));
    gs_client_close(client);
    return 1;
  }
  int best = 0;
  for (int k = 0; k < 10; k++) {
    printf("%d %.6f\n", k, probs[k]);
    if (probs[k] > probs[best])
      best = k;
  }
  printf("digit %d (output %s, %s [%lld, %lld])\n", best, out.name, out.datatype,
         (long long)out.shape[0], (long long)out.shape[1]);
  gs_client_close(client);
  return 0;
}
