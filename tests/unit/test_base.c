/* test_base.c - the error table, the per-thread error detail, log levels and
 * the file readers of src/base. */
#include "harness.h"

#include "base/error.h"
#include "base/units.h"
#include "base/fileutil.h"
#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static void error_names_and_messages(void) {
  CHECK_STR(gs_err_name(GS_ENOMEM), "GS_ENOMEM");
  CHECK_STR(gs_strerror(GS_ENOMEM), "out of memory");
  CHECK_STR(gs_err_name(GS_OK), "GS_OK");
  CHECK_STR(gs_strerror(GS_OK), "success");
  CHECK_STR(gs_err_name(-9999), "GS_E?");
  CHECK_STR(gs_strerror(-9999), "unknown error");
  /* Every code has its own name and a message, and codes are negative. */
#define EACH(name, value, msg)                         \
  CHECK((value) < 0);                                  \
  CHECK_STR(gs_err_name(value), "GS_" #name);          \
  CHECK_STR(gs_strerror(value), msg);
  GS_ERRNO_MAP(EACH)
#undef EACH
}

static void error_detail_is_recorded(void) {
  gs_error_clear();
  CHECK_STR(gs_error_detail(), "success");
  int rc = gs_error(GS_EINVAL, "size %d is too big", 42);
  CHECK_EQ(rc, GS_EINVAL);
  CHECK_EQ(gs_error_code(), GS_EINVAL);
  CHECK_STR(gs_error_detail(), "size 42 is too big");
  gs_error(GS_ENOENT, NULL);
  CHECK_STR(gs_error_detail(), "not found");
}

static void *other_thread(void *arg) {
  (void)arg;
  gs_error(GS_EIO, "from the other thread");
  return NULL;
}

static void error_detail_is_per_thread(void) {
  gs_error(GS_EINVAL, "mine");
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, other_thread, NULL), 0);
  pthread_join(t, NULL);
  CHECK_STR(gs_error_detail(), "mine");
}

static void log_levels_parse(void) {
  CHECK_EQ(gs_log_level_parse("error"), GS_LOG_ERROR);
  CHECK_EQ(gs_log_level_parse("debug"), GS_LOG_DEBUG);
  CHECK_EQ(gs_log_level_parse("loud"), -1);
  CHECK(gs_log_enabled(GS_LOG_ERROR));
}

static void parse_sizes_and_durations(void) {
  uint64_t b;
  CHECK_OK(gs_parse_bytes("512", &b));
  CHECK_EQ(b, 512);
  CHECK_OK(gs_parse_bytes("64K", &b));
  CHECK_EQ(b, 65536);
  CHECK_OK(gs_parse_bytes("1.5G", &b));
  CHECK_EQ(b, 3ull << 29);
  CHECK_OK(gs_parse_bytes("16GiB", &b));
  CHECK_EQ(b, 16ull << 30);
  CHECK_OK(gs_parse_bytes("100MB", &b));
  CHECK_EQ(b, 100ull << 20);
  CHECK_ERR(gs_parse_bytes("lots", &b), GS_EINVAL);
  CHECK_ERR(gs_parse_bytes("-1G", &b), GS_EINVAL);
  CHECK_ERR(gs_parse_bytes("5X", &b), GS_EINVAL);
  CHECK_ERR(gs_parse_bytes("5Gx", &b), GS_EINVAL);
  CHECK_ERR(gs_parse_bytes("1e30", &b), GS_ERANGE);
  int64_t s;
  CHECK_OK(gs_parse_duration("90s", &s));
  CHECK_EQ(s, 90);
  CHECK_OK(gs_parse_duration("30m", &s));
  CHECK_EQ(s, 1800);
  CHECK_OK(gs_parse_duration("2h", &s));
  CHECK_EQ(s, 7200);
  CHECK_OK(gs_parse_duration("10", &s)); /* Slurm: minutes */
  CHECK_EQ(s, 600);
  CHECK_OK(gs_parse_duration("1:30", &s));
  CHECK_EQ(s, 90);
  CHECK_OK(gs_parse_duration("01:02:03", &s));
  CHECK_EQ(s, 3723);
  CHECK_OK(gs_parse_duration("1-02:00:00", &s));
  CHECK_EQ(s, 93600);
  CHECK_ERR(gs_parse_duration("0", &s), GS_EINVAL);
  CHECK_ERR(gs_parse_duration("soon", &s), GS_EINVAL);
  CHECK_ERR(gs_parse_duration("5w", &s), GS_EINVAL);
  CHECK_ERR(gs_parse_duration("1:2:3:4", &s), GS_EINVAL);
  CHECK_MSG(strstr(gs_error_detail(), "1:2:3:4"), "message: %s", gs_error_detail());
}

/* What /proc says of a process and of this boot. */
static void processes_and_boot(void) {
  CHECK_EQ(gs_process_session(getpid()), getsid(0));
  CHECK(gs_process_start_ticks(getpid()) > 0);
  CHECK_EQ(gs_process_session(-5), -1);
  CHECK_EQ(gs_process_start_ticks(-5), 0);
  char boot[64];
  CHECK_EQ(gs_boot_id(boot, sizeof boot), 0);
  CHECK_EQ(strlen(boot), 36); /* a UUID, its newline gone */
}

static void read_files(void) {
  char path[] = "/tmp/gs-test-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  CHECK_EQ(write(fd, "12345\n", 6), 6);
  close(fd);
  uint64_t v = 0;
  CHECK_OK(gs_read_u64_file(path, &v));
  CHECK_EQ(v, 12345);
  char small[4];
  CHECK_EQ(gs_read_text_file(path, small, sizeof small), 3); /* truncated, NUL-terminated */
  CHECK_STR(small, "123");
  fd = open(path, O_WRONLY | O_TRUNC);
  CHECK_EQ(write(fd, "abc", 3), 3);
  close(fd);
  CHECK_ERR(gs_read_u64_file(path, &v), GS_EIO);
  CHECK(strstr(gs_error_detail(), path) != NULL);
  unlink(path);
  CHECK_ERR(gs_read_u64_file(path, &v), GS_ENOENT);
}

static const gs_test tests[] = {
    {"error_names_and_messages", error_names_and_messages},
    {"error_detail_is_recorded", error_detail_is_recorded},
    {"error_detail_is_per_thread", error_detail_is_per_thread},
    {"log_levels_parse", log_levels_parse},
    {"read_files", read_files},
    {"processes_and_boot", processes_and_boot},
    {"parse_sizes_and_durations", parse_sizes_and_durations},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {.name = "base", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}
