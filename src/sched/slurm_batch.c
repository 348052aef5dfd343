/* slurm_batch.c - the batch script and properties of a job handed to Slurm,
 * and Slurm's job states mapped (slurm_batch.h). */
#include "sched/slurm_batch.h"

#include "base/error.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 100000
#define MAX_PER_NODE 4096
#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

int gs_slurm_batch_check(const gs_job_request *req) {
  if (req->nodes < 1 || req->nodes > MAX_NODES)
    return gs_error(GS_EINVAL, "nodes is 1 to %d, not %d", MAX_NODES, req->nodes);
  if (req->gpus_per_node < 0 || req->gpus_per_node > MAX_PER_NODE)
    return gs_error(GS_EINVAL, "gpus_per_node is 0 to %d, not %d", MAX_PER_NODE,
                    req->gpus_per_node);
  if (req->ntasks_per_node < 0 || req->ntasks_per_node > MAX_PER_NODE)
    return gs_error(GS_EINVAL, "ntasks_per_node is 1 to %d (0: 1), not %d", MAX_PER_NODE,
                    req->ntasks_per_node);
  const char *p = req->partition ? req->partition : "";
  if (strlen(p) >= 64 || strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789_-.") != strlen(p))
    return gs_error(GS_EINVAL, "a partition is a Slurm partition name (letters, digits, "
                               "'_', '-', '.'; under 64 bytes), not '%s'", p);
  if (req->image && req->image[0])
    return gs_error(GS_EINVAL, "a job on several nodes runs no container image here: Slurm "
                               "runs it on its nodes (not supported)");
  if (req->need.gpus || req->need.gpu_mem || req->need.gpu_share)
    return gs_error(GS_EINVAL, "a job on several nodes asks for GPUs with gpus_per_node, not "
                               "gpus, gpu_mem or gpu_share");
  for (size_t i = 0; req->env && req->env[i]; i++)
    if (strchr(req->env[i], '=') - req->env[i] >= 256)
      return gs_error(GS_EINVAL, "env entry %zu: a name of 256 bytes or more", i);
  if (req->priority)
    return gs_error(GS_EINVAL, "a job on several nodes runs at Slurm's priority: priority is "
                               "for jobs on this machine");
  if ((req->mounts && req->mounts[0]) || (req->network && req->network[0]) ||
      req->writable_root)
    return gs_error(GS_EINVAL, "mounts, network and writable_root are for a job in a "
                               "container, which a job on several nodes is not");
  if (req->need.cpus || req->need.host_mem)
    return gs_error(GS_EINVAL, "a job on several nodes gets the CPUs and memory Slurm gives "
                               "its tasks; cpus and mem are for jobs on this machine");
  return GS_OK;
}

/* Appends " 's'" (s single-quoted for sh) to *buf; false when out of memory. */
static bool quote_into(char **buf, size_t *len, const char *s) {
  size_t need = *len + 4 * strlen(s) + 4;
  char *grown = realloc(*buf, need);
  if (!grown)
    return false;
  *buf = grown;
  char *o = *buf + *len;
  *o++ = ' ';
  *o++ = '\'';
  for (; *s; s++) {
    if (*s == '\'') {
      memcpy(o, "'\\''", 4);
      o += 4;
    } else {
      *o++ = *s;
    }
  }
  *o++ = '\'';
  *o = '\0';
  *len = (size_t)(o - *buf);
  return true;
}

/* The script: the rendezvous point, then each task through srun. The
 * per-task variables are set by a small sh in each task, since only there
 * are SLURM_PROCID and SLURM_LOCALID known. */
static char *batch_script(const gs_job_request *req) {
  static const char head[] =
      "#!/bin/sh\n"
      "# Written by gpusrv: the command runs once per task, through srun.\n"
      "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
      "MASTER_PORT=$((20000 + SLURM_JOB_ID %% 20000))\n"
      "export MASTER_ADDR MASTER_PORT\n"
      "exec srun%s --kill-on-bad-exit=1 /bin/sh -c '"
      "RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS "
      "LOCAL_WORLD_SIZE=${SLURM_NTASKS_PER_NODE:-1} NODE_RANK=$SLURM_NODEID; "
      "export RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK; exec \"$@\"' gpusrv-task";
  size_t len = sizeof head + 32;
  char *buf = malloc(len);
  if (!buf)
    return NULL;
  len = (size_t)snprintf(buf, len, head, req->mpi ? " --mpi=pmix" : "");
  for (size_t i = 0; req->argv[i]; i++)
    if (!quote_into(&buf, &len, req->argv[i])) {
      free(buf);
      return NULL;
    }
  char *done = realloc(buf, len + 2);
  if (!done) {
    free(buf);
    return NULL;
  }
  strcpy(done + len, "\n");
  return done;
}

/* The job's environment as v0.0.38 takes it: an object. (Its "nodes" is a
 * count: the [min, max] array its OpenAPI spec gives is taken and ignored
 * by Slurm 22.05.) */
static json_t *environment(const gs_job_request *req) {
  json_t *env = json_object();
  if (!env || json_object_set_new(env, "PATH", json_string(DEFAULT_PATH)) < 0) {
    json_decref(env);
    return NULL;
  }
  for (size_t i = 0; req->env && req->env[i]; i++) {
    const char *eq = strchr(req->env[i], '=');
    char name[256];
    if (!eq || (size_t)(eq - req->env[i]) >= sizeof name)
      continue; /* checked at submit */
    snprintf(name, sizeof name, "%.*s", (int)(eq - req->env[i]), req->env[i]);
    if (json_object_set_new(env, name, json_string(eq + 1)) < 0) {
      json_decref(env);
      return NULL;
    }
  }
  return env;
}

json_t *gs_slurm_batch_submission(const gs_job_request *req, const gs_slurm_batch_place *place) {
  char *script = batch_script(req);
  json_t *env = environment(req);
  int per_node = req->ntasks_per_node > 0 ? req->ntasks_per_node : 1;
  json_t *job = script && env ? json_pack(
      "{s:s, s:i, s:i, s:i, s:s, s:s, s:s, s:s, s:o}",
      "name", req->name && req->name[0] ? req->name : req->argv[0],
      "nodes", req->nodes, "tasks_per_node", per_node, "tasks", req->nodes * per_node,
      "current_working_directory", req->chdir && req->chdir[0] ? req->chdir : place->workdir,
      "standard_output", place->stdout_path, "standard_error", place->stderr_path,
      "account", place->account, "environment", env) : NULL;
  if (!(script && env))
    json_decref(env); /* json_pack takes an "o" value even when it fails */
  int rc = job ? 0 : -1;
  /* Slurm 22.05 makes a job requeueable whenever "requeue" is present,
   * false or not: it is sent only for true, and otherwise the cluster's
   * JobRequeue decides. */
  if (rc == 0 && req->requeue)
    rc = json_object_set_new(job, "requeue", json_true());
  if (rc == 0 && req->partition && req->partition[0])
    rc = json_object_set_new(job, "partition", json_string(req->partition));
  if (rc == 0 && req->gpus_per_node > 0) {
    char gpus[16];
    snprintf(gpus, sizeof gpus, "%d", req->gpus_per_node);
    rc = json_object_set_new(job, "gpus_per_node", json_string(gpus));
  }
  if (rc == 0 && req->time_limit_s > 0) /* minutes, rounded up */
    rc = json_object_set_new(job, "time_limit", json_integer((req->time_limit_s + 59) / 60));
  json_t *sub = rc == 0 ? json_pack("{s:s, s:o}", "script", script, "job", job) : NULL;
  if (rc != 0)
    json_decref(job); /* not given to json_pack, which takes it even when it fails */
  free(script);
  return sub;
}

int gs_slurm_batch_state(const char *s) {
  static const struct {
    const char *slurm;
    gs_job_state ours;
  } map[] = {
      {"PENDING", GS_JOB_PENDING},         {"REQUEUED", GS_JOB_PENDING},
      {"REQUEUE_HOLD", GS_JOB_PENDING},    {"REQUEUE_FED", GS_JOB_PENDING},
      {"RESV_DEL_HOLD", GS_JOB_PENDING},   {"REVOKED", GS_JOB_CANCELLED},
      {"RUNNING", GS_JOB_RUNNING},         {"CONFIGURING", GS_JOB_RUNNING},
      {"COMPLETING", GS_JOB_RUNNING},      {"SUSPENDED", GS_JOB_RUNNING},
      {"STAGE_OUT", GS_JOB_RUNNING},       {"SIGNALING", GS_JOB_RUNNING},
      {"RESIZING", GS_JOB_RUNNING},        {"STOPPED", GS_JOB_RUNNING},
      {"COMPLETED", GS_JOB_COMPLETED},     {"CANCELLED", GS_JOB_CANCELLED},
      {"FAILED", GS_JOB_FAILED},           {"BOOT_FAIL", GS_JOB_FAILED},
      {"DEADLINE", GS_JOB_TIMEOUT},        {"TIMEOUT", GS_JOB_TIMEOUT},
      {"NODE_FAIL", GS_JOB_NODE_FAIL},     {"PREEMPTED", GS_JOB_PREEMPTED},
      {"OUT_OF_MEMORY", GS_JOB_OUT_OF_MEMORY}, {"SPECIAL_EXIT", GS_JOB_PENDING},
      {"LAUNCH_FAILED", GS_JOB_FAILED},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(map[i].slurm, s) == 0)
      return (int)map[i].ours;
  return -1;
}
