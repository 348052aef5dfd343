/* holds.h - devices an outside scheduler gave its jobs on this node, held
 * in the front desk's ledger for each job's lifetime (owner "SCHEDULER job
 * ID (USER)"), so that model instances and local jobs never take what it
 * gave away. Slurm books and releases them through its prolog and epilog
 * (`gpusrv slurm prolog|epilog`); a Kubernetes device plugin would make the
 * same three calls: book at Allocate, release when the pod goes, and
 * reconcile with the list of pods that still hold devices (kubelet's
 * PodResources), since kubelet tells a plugin of no pod's end.
 *
 * A hold takes all that is left of each GPU: its compute share and memory
 * not booked yet. GPUs are named by index, in the order Slurm numbers them
 * (slurm_gpus.h), which a device plugin can advertise as its device ids.
 * The holds are kept in STATE_DIR/holds.json (written whole, through a
 * rename): a restarted daemon books them again, then drops Slurm's whose
 * jobs squeue no longer lists (keeping all when squeue cannot answer). */
#ifndef GS_SCHED_HOLDS_H
#define GS_SCHED_HOLDS_H

#include "sched/sched.h"

#include <stdint.h>

/* A reconcile whose caller does not say when its list was taken keeps holds
 * younger than this: the list may be older than they are (kubelet's
 * PodResources list, then an Allocate before the list arrives). */
#define GS_HOLDS_RECONCILE_GRACE_S 30.0

typedef struct gs_holds gs_holds;

/* Loads the kept holds (or an older daemon's STATE_DIR/slurm-jobs.json)
 * and books them again; `squeue` names the command that lists Slurm's jobs
 * (NULL: "squeue" on PATH). The caller closes it; close releases the
 * bookings and keeps the file. */
int gs_holds_open(gs_ledger *ledger, const char *state_dir, const char *squeue, gs_holds **out);
void gs_holds_close(gs_holds *h);

/* Books GPUs `gpus` (indices as in gs_slurm_gpus) for `scheduler`'s job
 * `job` of `user`. Names: a scheduler is 1-15 of [a-z0-9-], a job 1-63 of
 * letters, digits and "._:-" (a Slurm job id, a pod's uid), a user 1-63
 * bytes. Booking a job that holds already changes nothing. GS_EINVAL for a
 * bad name or an index the node does not have. */
int gs_hold_book(gs_holds *h, const char *scheduler, const char *job, const char *user,
                 const int *gpus, int n_gpus);
/* Releases a job's hold; GS_ENOENT when it has none. */
int gs_hold_release(gs_holds *h, const char *scheduler, const char *job);
/* Drops `scheduler`'s holds of jobs not in live[0..n_live), the jobs the
 * scheduler says still ran when it listed them at `as_of` (Unix seconds):
 * holds booked after that are kept. Returns how many were dropped; GS_EIO
 * when the file cannot be written (they are dropped all the same). */
int gs_holds_reconcile(gs_holds *h, const char *scheduler, const char *const *live, int n_live,
                       double as_of);

#endif
