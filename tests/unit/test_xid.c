/* test_xid.c - what the CUDA plugin makes of Xid errors: the ones that need
 * a reset make a device unhealthy for good, the ones to watch degrade it
 * for a while, and the reason names the Xid, when and what it means. */
#include "harness.h"

#include "hal/cuda/xid.h"

#include <string.h>

static void severity_of_known_xids(void) {
  const char *meaning = NULL;
  CHECK_EQ(gs_xid_severity(79, &meaning), GS_HEALTH_UNHEALTHY);
  CHECK(strstr(meaning, "fallen off the bus") != NULL);
  CHECK_EQ(gs_xid_severity(48, &meaning), GS_HEALTH_UNHEALTHY);
  CHECK_EQ(gs_xid_severity(31, &meaning), GS_HEALTH_DEGRADED);
  CHECK_EQ(gs_xid_severity(45, &meaning), GS_HEALTH_HEALTHY);
  CHECK_EQ(gs_xid_severity(999, &meaning), GS_HEALTH_DEGRADED);
  CHECK(strstr(meaning, "could not identify") != NULL);
  CHECK_EQ(gs_xid_severity(12345, &meaning), GS_HEALTH_DEGRADED);
}

static void degraded_ages_out_unhealthy_stays(void) {
  gs_xid_record r = {0};
  char why[160] = "";
  CHECK_EQ(gs_xid_health(&r, 1000, why, sizeof why), GS_HEALTH_HEALTHY);
  gs_xid_note(&r, 45, 1000); /* cleanup after a process: nothing to report */
  CHECK_EQ(gs_xid_health(&r, 1000, why, sizeof why), GS_HEALTH_HEALTHY);
  gs_xid_note(&r, 31, 2000);
  CHECK_EQ(gs_xid_health(&r, 2000 + GS_XID_DEGRADED_SECONDS, why, sizeof why),
           GS_HEALTH_DEGRADED);
  CHECK(strstr(why, "Xid 31 at 1970-01-01 00:33:20 UTC: GPU memory page fault") == why);
  CHECK(strstr(why, "(2 Xid errors since start)") != NULL);
  CHECK_EQ(gs_xid_health(&r, 2001 + GS_XID_DEGRADED_SECONDS, why, sizeof why),
           GS_HEALTH_HEALTHY);
  gs_xid_note(&r, 79, 3000);
  gs_xid_note(&r, 13, 3001); /* a lesser one after does not hide it */
  CHECK_EQ(gs_xid_health(&r, 3000 + 100 * GS_XID_DEGRADED_SECONDS, why, sizeof why),
           GS_HEALTH_UNHEALTHY);
  CHECK(strstr(why, "Xid 79") == why);
  CHECK(strstr(why, "reset the GPU or reboot") != NULL);
  CHECK_EQ(r.count, 4);
  CHECK_EQ(r.worst_xid, 79);
}

int main(int argc, char **argv) {
  static const gs_test tests[] = {
      {"severity_of_known_xids", severity_of_known_xids},
      {"degraded_ages_out_unhealthy_stays", degraded_ages_out_unhealthy_stays},
      {NULL, NULL},
  };
  gs_test_suite suite = {.name = "xid", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}
