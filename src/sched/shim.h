/* shim.h - the supervisor of one job's processes (shim.c), run as the
 * executable gpusrv-job-shim. Internal to src/sched. */
#ifndef GS_SCHED_SHIM_H
#define GS_SCHED_SHIM_H

/* Reads JOB_DIR/spec.json, runs the job, writes JOB_DIR/exit.json. */
int gs_job_shim_main(const char *job_dir);

#endif
