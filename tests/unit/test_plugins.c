/* test_plugins.c - the plugin loader: a good plugin loads and runs, a plugin
 * of another API version, one without an init function and one whose device
 * is absent are skipped with their reasons, and GPUSRV_BACKENDS restricts
 * what loads. argv[1] is the directory of the test plugins. */
#include "harness.h"

#include "hal/hal.h"

#include <stdlib.h>

static const char *plugin_dir;

static const gs_skipped_backend *skipped(const char *name) {
  for (int i = 0; i < gs_hal_skipped_count(); i++)
    if (strcmp(gs_hal_skipped(i)->name, name) == 0)
      return gs_hal_skipped(i);
  return NULL;
}

static void loads_good_and_skips_bad(void) {
  setenv("GPUSRV_PLUGIN_PATH", plugin_dir, 1);
  unsetenv("GPUSRV_BACKENDS");
  CHECK_OK(gs_hal_init());
  CHECK(gs_hal_backend_by_name("cpu") != NULL);
  CHECK(gs_hal_backend_by_name("testcpu") != NULL);
  CHECK(gs_hal_device_find("testcpu0") != NULL);
  CHECK_EQ(gs_hal_device_count(), 2);

  const gs_skipped_backend *s = skipped("badversion");
  CHECK_MSG(s && strstr(s->reason, "API version"), "badversion: %s", s ? s->reason : "not skipped");
  s = skipped("noinit");
  CHECK_MSG(s && strstr(s->reason, "gs_plugin_init"), "noinit: %s", s ? s->reason : "not skipped");
  s = skipped("nodevice");
  CHECK_MSG(s && strstr(s->reason, "no fake driver"), "nodevice: %s", s ? s->reason : "not skipped");
  CHECK(gs_hal_backend_by_name("badversion") == NULL);
  gs_hal_shutdown();
}

static void backends_env_restricts(void) {
  setenv("GPUSRV_PLUGIN_PATH", plugin_dir, 1);
  setenv("GPUSRV_BACKENDS", "testcpu", 1);
  CHECK_OK(gs_hal_init());
  CHECK(gs_hal_backend_by_name("cpu") == NULL);
  CHECK(gs_hal_backend_by_name("testcpu") != NULL);
  const gs_skipped_backend *s = skipped("cpu");
  CHECK(s && strstr(s->reason, "GPUSRV_BACKENDS"));
  s = skipped("badversion");
  CHECK(s && strstr(s->reason, "GPUSRV_BACKENDS"));
  /* Device numbering starts at the first backend that loaded. */
  CHECK_EQ(gs_device_get_info(gs_hal_device(0))->index, 0);
  CHECK_STR(gs_device_get_info(gs_hal_device(0))->id, "testcpu0");
  gs_hal_shutdown();
}

static void nothing_loads(void) {
  setenv("GPUSRV_PLUGIN_PATH", "/nonexistent", 1);
  setenv("GPUSRV_BACKENDS", "nosuch", 1);
  CHECK_ERR(gs_hal_init(), GS_ENOENT);
  CHECK(strstr(gs_error_detail(), "no backend") != NULL);
  CHECK_EQ(gs_hal_skipped_count(), 1); /* cpu, not wanted */
  /* A failed start leaves nothing half-done: starting again works. */
  unsetenv("GPUSRV_BACKENDS");
  CHECK_OK(gs_hal_init());
  CHECK_ERR(gs_hal_init(), GS_ESTATE);
  gs_hal_shutdown();
}

static void plugin_device_works(void) {
  setenv("GPUSRV_PLUGIN_PATH", plugin_dir, 1);
  unsetenv("GPUSRV_BACKENDS");
  CHECK_OK(gs_hal_init());
  gs_device_t *d = gs_hal_device_find("testcpu0");
  CHECK(d != NULL);
  gs_stream_t *s;
  gs_buffer_t *b;
  CHECK_OK(gs_stream_create(d, &s));
  CHECK_OK(gs_pool_alloc(gs_device_pool(d, GS_MEM_DEVICE), 4096, s, &b));
  char in[4096], out[4096];
  for (int i = 0; i < 4096; i++)
    in[i] = (char)i;
  CHECK_OK(gs_stream_copy_h2d(s, b, 0, in, sizeof in));
  CHECK_OK(gs_stream_copy_d2h(s, out, b, 0, sizeof out));
  CHECK_OK(gs_stream_synchronize(s));
  CHECK(memcmp(in, out, sizeof in) == 0);
  gs_buffer_free(b, s);
  gs_stream_destroy(s);
  gs_hal_shutdown();
}

static void free_on_a_stream_of_another_device(void) {
  setenv("GPUSRV_PLUGIN_PATH", plugin_dir, 1);
  unsetenv("GPUSRV_BACKENDS");
  CHECK_OK(gs_hal_init());
  gs_device_t *cpu = gs_hal_device_find("cpu0"), *other = gs_hal_device_find("testcpu0");
  CHECK(cpu && other);
  gs_stream_t *s;
  gs_buffer_t *b;
  CHECK_OK(gs_stream_create(other, &s));
  CHECK_OK(gs_pool_alloc(gs_device_pool(cpu, GS_MEM_DEVICE), 4096, NULL, &b));
  gs_buffer_free(b, s); /* ordered after s's work */
  gs_stream_destroy(s); /* every pool forgets s, not only testcpu0's */
  CHECK_OK(gs_pool_alloc(gs_device_pool(cpu, GS_MEM_DEVICE), 4096, NULL, &b));
  gs_buffer_free(b, NULL);
  gs_hal_shutdown();
}

static const gs_test tests[] = {
    {"free_on_a_stream_of_another_device", free_on_a_stream_of_another_device},
    {"loads_good_and_skips_bad", loads_good_and_skips_bad},
    {"backends_env_restricts", backends_env_restricts},
    {"nothing_loads", nothing_loads},
    {"plugin_device_works", plugin_device_works},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PLUGIN_DIR [CASE...]\n", argv[0]);
    return 2;
  }
  plugin_dir = argv[1];
  gs_test_suite suite = {.name = "plugins", .tests = tests};
  return gs_test_run(&suite, argc - 1, argv + 1);
}
