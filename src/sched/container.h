/* container.h - jobs in containers. podman runs a local OCI image,
 * rootless, as the job's own Unix user, from inside the job's cgroup: the
 * container's processes stay there (rootless podman makes no cgroup of its
 * own with cgroup v1, and is told not to with v2), so the front desk's
 * memory, CPU and pid limits, its accounting and its kills hold as for any
 * job. gpusrv writes no runtime: podman and its OCI runtime do the work.
 * Internal to src/sched. */
#ifndef GS_SCHED_CONTAINER_H
#define GS_SCHED_CONTAINER_H

#include "sched/sched.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Whether `image` matches one of `patterns`: comma-separated shell
 * patterns ("localhost/gpusrv-*,docker.io/pytorch/pytorch:2.*"); none match "". */
bool gs_image_allowed(const char *patterns, const char *image);

/* What the daemon's configuration allows containers. */
typedef struct gs_container_policy {
  const char *allowed_images; /* patterns, as gs_image_allowed takes them */
  bool host_network;          /* a job may ask for the host's network */
  bool pull;                  /* a missing image is pulled at start (--pull=missing) */
} gs_container_policy;

/* A request's image, mounts ("SRC:DST[:ro|:rw]"), network and root checked
 * against the policy and made into the job's container object {"image",
 * "mounts", "network", "writable_root", "pull"}, which the caller owns;
 * NULL with GS_EINVAL (GS_EPERM: not allowed here) and the reason. */
json_t *gs_container_from_request(const gs_container_policy *policy, const gs_job_request *req);

/* Who podman runs as. */
typedef struct gs_container_user {
  uid_t uid;
  gid_t gid;
  const char *name;
  const char *home;
} gs_container_user;

/* Runs `podman ARGS...` as `u` (through runuser when this process is root
 * and u is not), its output (and its errors, with errors_too) into `out`
 * (cap bytes, NUL-ended; NULL: dropped), for at most timeout_s. Returns
 * podman's exit status, or an error (GS_ENOENT: podman is not installed;
 * GS_ETIMEDOUT). */
int gs_podman_run_as(const gs_container_user *u, const char *const *args, char *out, size_t cap,
                     bool errors_too, double timeout_s);

/* u's local images that `patterns` allow (one entry per name), into *out
 * (malloc'd; the caller frees it), *n of them. GS_EIO when podman cannot
 * list them. */
int gs_container_images(const gs_container_user *u, const char *patterns, gs_image_info **out,
                        int *n);

/* Whether `image` is in u's local image store: 0, GS_EINVAL with the
 * reason, or GS_EIO when podman cannot be asked. */
int gs_container_image_present(const gs_container_user *u, const char *image);

/* The environment podman itself runs with, for u: PATH, HOME, USER and
 * LOGNAME; no XDG_RUNTIME_DIR, so that podman keeps away from the user's
 * systemd (its run directory is then /tmp/podman-run-UID). A NULL-ended
 * array of malloc'd strings; free with gs_strings_free. */
char **gs_podman_env(const gs_container_user *u);

/* The command line that runs the job in its container: podman's options
 * (no network, a read-only root, no new privileges, the job's work
 * directory at /job, the mounts, the booked devices by their CDI names),
 * the image, then the job's argv.
 * `env_file` holds the job's variables. A NULL-ended array of malloc'd
 * strings (free with gs_strings_free); NULL when out of memory. */
char **gs_container_argv(const json_t *container, const char *name, const char *work_dir,
                         const char *workdir_inside, const char *env_file,
                         const json_t *cdi_devices, const json_t *job_argv);

/* The CDI names ("KIND=NAME") that the spec at `cdi_spec` gives the
 * devices of `devices` ("cuda0,cuda1"), as a JSON array; devices it does
 * not name are left out (the container does not see them). An unreadable
 * spec gives none. */
json_t *gs_cdi_devices(const char *cdi_spec, const char *devices);

void gs_strings_free(char **list);

#endif
