/* shim_main.c - `gpusrv-job-shim DIR`: the supervisor of one job (shim.c),
 * a small executable of its own so that starting a job costs the exec of a
 * program that links little (the gpusrv binary loads the whole engine). */
#include "sched/shim.h"

#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gpusrv-job-shim JOB_DIR (started by gpusrv serve)\n");
    return 2;
  }
  return gs_job_shim_main(argv[1]);
}
