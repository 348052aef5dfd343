/* store.c - the front desk's state in SQLite: schema, and one transaction
 * per call (WAL, synchronous=FULL, so that an acknowledged job survives a
 * kill -9 of the daemon and a crash of the machine). */
#include "sched/store.h"

#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct gs_store {
  sqlite3 *db;
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS tenants("
    "  name TEXT PRIMARY KEY, weight REAL NOT NULL, max_devices REAL, max_device_mem INTEGER,"
    "  max_jobs INTEGER, max_cpus REAL, max_host_mem INTEGER, unix_user TEXT, unix_group TEXT,"
    "  allow_root INTEGER, admin INTEGER, created REAL, max_priority INTEGER DEFAULT 0);"
    "CREATE TABLE IF NOT EXISTS tokens("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  tenant TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE,"
    "  salt BLOB NOT NULL, hash BLOB NOT NULL, created REAL);"
    "CREATE TABLE IF NOT EXISTS jobs("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, name TEXT, argv TEXT, env TEXT,"
    "  chdir TEXT, gpus INTEGER, gpu_mem INTEGER, gpu_share INTEGER, cpus REAL, host_mem INTEGER,"
    "  time_limit INTEGER, priority INTEGER, requeue INTEGER, state TEXT, reason TEXT,"
    "  submit_time REAL, start_time REAL, end_time REAL, pid INTEGER, pid_start INTEGER,"
    "  exit_code INTEGER, signal INTEGER, devices TEXT, runs INTEGER, cpu_seconds REAL,"
    "  device_seconds REAL, device_mem_byte_seconds REAL, container TEXT, slurm TEXT);"
    "CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);"
    "CREATE TABLE IF NOT EXISTS job_events("
    "  job INTEGER NOT NULL, time REAL NOT NULL, state TEXT NOT NULL, reason TEXT);"
    "CREATE INDEX IF NOT EXISTS job_events_job ON job_events(job);"
    /* Every tenant ever added has a serial of its own, never given again:
     * a tenant removed and added again under its name is another tenant,
     * and the jobs of the first stay out of the second's reach. */
    "CREATE TABLE IF NOT EXISTS tenant_serials(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT);";

/* Databases from before tenant serials: the columns are added, and the
 * tenants and jobs there are given serials once, by name. */
static int add_tenant_serials(gs_store *st) {
  if (sqlite3_exec(st->db, "ALTER TABLE tenants ADD COLUMN serial INTEGER", NULL, NULL, NULL) !=
      SQLITE_OK)
    return GS_OK; /* the column is there: nothing to do */
  char *msg = NULL;
  int rc = sqlite3_exec(
      st->db,
      "BEGIN IMMEDIATE;"
      "ALTER TABLE jobs ADD COLUMN tenant_serial INTEGER DEFAULT 0;"
      "INSERT INTO tenant_serials(name) SELECT name FROM tenants ORDER BY created, name;"
      "UPDATE tenants SET serial = (SELECT max(id) FROM tenant_serials s WHERE s.name = tenants.name);"
      "UPDATE jobs SET tenant_serial = coalesce((SELECT serial FROM tenants t WHERE t.name = "
      "jobs.tenant), 0);"
      "COMMIT;",
      NULL, NULL, &msg);
  if (rc != SQLITE_OK) {
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    rc = gs_error(GS_EIO, "state database: giving tenants serials: %s", msg ? msg : "failed");
  }
  sqlite3_free(msg);
  return rc;
}

static int db_error(gs_store *st, const char *what) {
  return gs_error(GS_EIO, "state database: %s: %s", what, sqlite3_errmsg(st->db));
}

/* The database, its -wal and its -shm hold every tenant's job commands and
 * environment: they are the daemon's alone (0600), whatever the umask, and a
 * file left readable by an older version is closed at open. SQLite gives the
 * -wal and -shm it creates the database file's mode. A path that is not a
 * regular file (a symlink, a FIFO) is refused. */
static int make_private(const char *path, bool create) {
  int f = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (create ? O_CREAT : 0),
               0600);
  if (f < 0)
    return !create && errno == ENOENT ? GS_OK
                                      : gs_error(GS_EIO, "cannot open the state database %s: %s",
                                                 path, strerror(errno));
  struct stat sb;
  int rc = GS_OK;
  if (fstat(f, &sb) < 0 || !S_ISREG(sb.st_mode))
    rc = gs_error(GS_EIO, "the state database %s is not a regular file", path);
  else if ((sb.st_mode & 077) && fchmod(f, 0600) < 0)
    rc = gs_error(GS_EIO, "cannot make %s private (mode 0600): %s", path, strerror(errno));
  close(f);
  return rc;
}

static int make_files_private(const char *path) {
  char side[1100];
  int rc = make_private(path, true);
  snprintf(side, sizeof side, "%s-wal", path);
  if (rc == 0)
    rc = make_private(side, false);
  snprintf(side, sizeof side, "%s-shm", path);
  if (rc == 0)
    rc = make_private(side, false);
  return rc;
}

int gs_store_open(const char *path, gs_store **out) {
  int private_rc = make_files_private(path);
  if (private_rc < 0)
    return private_rc;
  gs_store *st = calloc(1, sizeof *st);
  if (!st)
    return gs_error(GS_ENOMEM, "out of memory opening %s", path);
  if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                         SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
    int rc = gs_error(GS_EIO, "cannot open the state database %s: %s", path,
                      st->db ? sqlite3_errmsg(st->db) : "out of memory");
    sqlite3_close(st->db);
    free(st);
    return rc;
  }
  sqlite3_busy_timeout(st->db, 5000);
  char *msg = NULL;
  if (sqlite3_exec(st->db,
                   "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
                   NULL, NULL, &msg) != SQLITE_OK ||
      sqlite3_exec(st->db, schema, NULL, NULL, &msg) != SQLITE_OK) {
    int rc = gs_error(GS_EIO, "state database %s: %s", path, msg ? msg : "cannot set up");
    sqlite3_free(msg);
    sqlite3_close(st->db);
    free(st);
    return rc;
  }
  /* Databases from before containers: the column is added (an error where
   * it is there already). */
  sqlite3_exec(st->db, "ALTER TABLE jobs ADD COLUMN container TEXT", NULL, NULL, NULL);
  sqlite3_exec(st->db, "ALTER TABLE jobs ADD COLUMN slurm TEXT", NULL, NULL, NULL);
  int migrated = add_tenant_serials(st);
  if (migrated < 0) {
    sqlite3_close(st->db);
    free(st);
    return migrated;
  }
  *out = st;
  return GS_OK;
}

void gs_store_close(gs_store *st) {
  if (!st)
    return;
  sqlite3_close(st->db);
  free(st);
}

/* ---- statements ----------------------------------------------------------------------- */

static sqlite3_stmt *prepare(gs_store *st, const char *sql) {
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK)
    return NULL;
  return s;
}

static const char *text_col(sqlite3_stmt *s, int i) {
  const unsigned char *t = sqlite3_column_text(s, i);
  return t ? (const char *)t : "";
}

/* Runs a statement that returns no rows, then finalizes it. */
static int run_done(gs_store *st, sqlite3_stmt *s, const char *what) {
  int rc = sqlite3_step(s) == SQLITE_DONE ? GS_OK : db_error(st, what);
  sqlite3_finalize(s);
  return rc;
}

/* ---- tenants and tokens ------------------------------------------------------------------ */

int gs_store_tenant_insert(gs_store *st, gs_tenant *t) {
  sqlite3_stmt *s = prepare(st, "INSERT INTO tenant_serials(name) VALUES(?)");
  if (!s)
    return db_error(st, "adding a tenant");
  sqlite3_bind_text(s, 1, t->name, -1, SQLITE_TRANSIENT);
  int serial_rc = run_done(st, s, "adding a tenant");
  if (serial_rc < 0)
    return serial_rc;
  t->serial = sqlite3_last_insert_rowid(st->db);
  s = prepare(st, "INSERT INTO tenants VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  if (!s)
    return db_error(st, "adding a tenant");
  sqlite3_bind_text(s, 1, t->name, -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(s, 2, t->weight);
  sqlite3_bind_double(s, 3, t->max_devices);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)t->max_device_mem);
  sqlite3_bind_int(s, 5, t->max_jobs);
  sqlite3_bind_double(s, 6, t->max_cpus);
  sqlite3_bind_int64(s, 7, (sqlite3_int64)t->max_host_mem);
  sqlite3_bind_text(s, 8, t->unix_user, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 9, t->unix_group, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(s, 10, t->allow_root);
  sqlite3_bind_int(s, 11, t->admin);
  sqlite3_bind_double(s, 12, t->created);
  sqlite3_bind_int(s, 13, t->max_priority);
  sqlite3_bind_int64(s, 14, t->serial);
  int rc = sqlite3_step(s);
  sqlite3_finalize(s);
  if (rc == SQLITE_CONSTRAINT)
    return gs_error(GS_EEXIST, "tenant '%s' already exists", t->name);
  return rc == SQLITE_DONE ? GS_OK : db_error(st, "adding a tenant");
}

int gs_store_tenant_delete(gs_store *st, const char *name) {
  sqlite3_stmt *s = prepare(st, "DELETE FROM tenants WHERE name = ?");
  if (!s)
    return db_error(st, "removing a tenant");
  sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
  int rc = run_done(st, s, "removing a tenant");
  if (rc == 0 && sqlite3_changes(st->db) == 0)
    return gs_error(GS_ENOENT, "no tenant '%s'", name);
  return rc;
}

int gs_store_tenants_load(gs_store *st, gs_tenant **out, int *n) {
  sqlite3_stmt *s = prepare(st, "SELECT * FROM tenants ORDER BY created, name");
  if (!s)
    return db_error(st, "reading tenants");
  gs_tenant *all = NULL;
  int count = 0, rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    gs_tenant *grown = realloc(all, (size_t)(count + 1) * sizeof *all);
    if (!grown) {
      free(all);
      sqlite3_finalize(s);
      return gs_error(GS_ENOMEM, "out of memory reading tenants");
    }
    all = grown;
    gs_tenant *t = &all[count++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", text_col(s, 0));
    t->weight = sqlite3_column_double(s, 1);
    t->max_devices = sqlite3_column_double(s, 2);
    t->max_device_mem = (uint64_t)sqlite3_column_int64(s, 3);
    t->max_jobs = sqlite3_column_int(s, 4);
    t->max_cpus = sqlite3_column_double(s, 5);
    t->max_host_mem = (uint64_t)sqlite3_column_int64(s, 6);
    snprintf(t->unix_user, sizeof t->unix_user, "%s", text_col(s, 7));
    snprintf(t->unix_group, sizeof t->unix_group, "%s", text_col(s, 8));
    t->allow_root = sqlite3_column_int(s, 9);
    t->admin = sqlite3_column_int(s, 10);
    t->created = sqlite3_column_double(s, 11);
    t->max_priority = sqlite3_column_int(s, 12);
    t->serial = sqlite3_column_int64(s, 13);
  }
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) {
    free(all);
    return db_error(st, "reading tenants");
  }
  *out = all;
  *n = count;
  return GS_OK;
}

int gs_store_token_insert(gs_store *st, const char *tenant, const uint8_t salt[16],
                          const uint8_t hash[32], int64_t *id) {
  sqlite3_stmt *s = prepare(st, "INSERT INTO tokens(tenant, salt, hash, created) "
                                "VALUES(?, ?, ?, (julianday('now') - 2440587.5) * 86400.0)");
  if (!s)
    return db_error(st, "adding a token");
  sqlite3_bind_text(s, 1, tenant, -1, SQLITE_TRANSIENT);
  sqlite3_bind_blob(s, 2, salt, 16, SQLITE_TRANSIENT);
  sqlite3_bind_blob(s, 3, hash, 32, SQLITE_TRANSIENT);
  int rc = run_done(st, s, "adding a token");
  if (rc == 0)
    *id = sqlite3_last_insert_rowid(st->db);
  return rc;
}

int gs_store_token_get(gs_store *st, int64_t id, char tenant[64], uint8_t salt[16],
                       uint8_t hash[32]) {
  sqlite3_stmt *s = prepare(st, "SELECT tenant, salt, hash FROM tokens WHERE id = ?");
  if (!s)
    return db_error(st, "reading a token");
  sqlite3_bind_int64(s, 1, id);
  int rc = sqlite3_step(s);
  if (rc != SQLITE_ROW || sqlite3_column_bytes(s, 1) != 16 || sqlite3_column_bytes(s, 2) != 32) {
    sqlite3_finalize(s);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? GS_ENOENT : db_error(st, "reading a token");
  }
  snprintf(tenant, 64, "%s", text_col(s, 0));
  memcpy(salt, sqlite3_column_blob(s, 1), 16);
  memcpy(hash, sqlite3_column_blob(s, 2), 32);
  sqlite3_finalize(s);
  return GS_OK;
}

int gs_store_token_count(gs_store *st, int64_t *n) {
  sqlite3_stmt *s = prepare(st, "SELECT count(*) FROM tokens");
  if (!s || sqlite3_step(s) != SQLITE_ROW) {
    sqlite3_finalize(s);
    return db_error(st, "counting tokens");
  }
  *n = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  return GS_OK;
}

/* ---- jobs ------------------------------------------------------------------------------- */

#define JOB_COLUMNS                                                                          \
  "id, tenant, name, argv, env, chdir, gpus, gpu_mem, gpu_share, cpus, host_mem, time_limit, " \
  "priority, requeue, state, reason, submit_time, start_time, end_time, pid, pid_start, "     \
  "exit_code, signal, devices, runs, cpu_seconds, device_seconds, device_mem_byte_seconds, "    \
  "tenant_serial, container, slurm"

static void bind_json(sqlite3_stmt *s, int i, const json_t *j) {
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  if (text)
    sqlite3_bind_text(s, i, text, -1, free);
  else
    sqlite3_bind_text(s, i, "[]", -1, SQLITE_STATIC);
}

/* Binds every column but id, from 2 on (in JOB_COLUMNS order). */
static void bind_job(sqlite3_stmt *s, const gs_job *j) {
  sqlite3_bind_text(s, 2, j->tenant, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, j->name, -1, SQLITE_TRANSIENT);
  bind_json(s, 4, j->argv);
  bind_json(s, 5, j->env);
  sqlite3_bind_text(s, 6, j->chdir, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(s, 7, j->need.gpus);
  sqlite3_bind_int64(s, 8, (sqlite3_int64)j->need.gpu_mem);
  sqlite3_bind_int(s, 9, j->need.gpu_share);
  sqlite3_bind_double(s, 10, j->need.cpus);
  sqlite3_bind_int64(s, 11, (sqlite3_int64)j->need.host_mem);
  sqlite3_bind_int64(s, 12, j->time_limit_s);
  sqlite3_bind_int(s, 13, j->priority);
  sqlite3_bind_int(s, 14, j->requeue);
  sqlite3_bind_text(s, 15, gs_job_state_name(j->state), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 16, j->reason, -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(s, 17, j->submit_time);
  sqlite3_bind_double(s, 18, j->start_time);
  sqlite3_bind_double(s, 19, j->end_time);
  sqlite3_bind_int64(s, 20, j->pid);
  sqlite3_bind_int64(s, 21, (sqlite3_int64)j->pid_start);
  sqlite3_bind_int(s, 22, j->exit_code);
  sqlite3_bind_int(s, 23, j->signal);
  sqlite3_bind_text(s, 24, j->devices, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(s, 25, j->runs);
  sqlite3_bind_double(s, 26, j->cpu_seconds);
  sqlite3_bind_double(s, 27, j->device_seconds);
  sqlite3_bind_double(s, 28, j->device_mem_byte_seconds);
  sqlite3_bind_int64(s, 29, j->tenant_serial);
  char *container = j->container ? json_dumps(j->container, JSON_COMPACT) : NULL;
  if (container)
    sqlite3_bind_text(s, 30, container, -1, free);
  else
    sqlite3_bind_null(s, 30);
  char *slurm = j->slurm ? json_dumps(j->slurm, JSON_COMPACT) : NULL;
  if (slurm)
    sqlite3_bind_text(s, 31, slurm, -1, free);
  else
    sqlite3_bind_null(s, 31);
}

static gs_job *read_job(sqlite3_stmt *s) {
  gs_job *j = calloc(1, sizeof *j);
  if (!j)
    return NULL;
  j->id = sqlite3_column_int64(s, 0);
  snprintf(j->tenant, sizeof j->tenant, "%s", text_col(s, 1));
  snprintf(j->name, sizeof j->name, "%s", text_col(s, 2));
  j->argv = json_loads(text_col(s, 3), 0, NULL);
  j->env = json_loads(text_col(s, 4), 0, NULL);
  if (!json_is_array(j->argv) || !json_is_array(j->env)) {
    json_decref(j->argv);
    json_decref(j->env);
    j->argv = json_array();
    j->env = json_array();
  }
  snprintf(j->chdir, sizeof j->chdir, "%s", text_col(s, 5));
  j->need.gpus = sqlite3_column_int(s, 6);
  j->need.gpu_mem = (uint64_t)sqlite3_column_int64(s, 7);
  j->need.gpu_share = sqlite3_column_int(s, 8);
  j->need.cpus = sqlite3_column_double(s, 9);
  j->need.host_mem = (uint64_t)sqlite3_column_int64(s, 10);
  j->time_limit_s = sqlite3_column_int64(s, 11);
  j->priority = sqlite3_column_int(s, 12);
  j->requeue = sqlite3_column_int(s, 13);
  int state = gs_job_state_from_name(text_col(s, 14));
  j->state = state < 0 ? GS_JOB_LOST : (gs_job_state)state;
  snprintf(j->reason, sizeof j->reason, "%s", text_col(s, 15));
  j->submit_time = sqlite3_column_double(s, 16);
  j->start_time = sqlite3_column_double(s, 17);
  j->end_time = sqlite3_column_double(s, 18);
  j->pid = (pid_t)sqlite3_column_int64(s, 19);
  j->pid_start = (uint64_t)sqlite3_column_int64(s, 20);
  j->exit_code = sqlite3_column_int(s, 21);
  j->signal = sqlite3_column_int(s, 22);
  snprintf(j->devices, sizeof j->devices, "%s", text_col(s, 23));
  j->runs = sqlite3_column_int(s, 24);
  j->cpu_seconds = sqlite3_column_double(s, 25);
  j->device_seconds = sqlite3_column_double(s, 26);
  j->device_mem_byte_seconds = sqlite3_column_double(s, 27);
  j->tenant_serial = sqlite3_column_int64(s, 28);
  if (sqlite3_column_type(s, 29) != SQLITE_NULL) {
    j->container = json_loads(text_col(s, 29), 0, NULL);
    if (!json_is_object(j->container)) { /* unreadable: the job cannot run as asked */
      json_decref(j->container);
      j->container = json_pack("{s:s, s:[]}", "image", "", "mounts");
    }
  }
  if (sqlite3_column_type(s, 30) != SQLITE_NULL) {
    j->slurm = json_loads(text_col(s, 30), 0, NULL);
    if (!json_is_object(j->slurm)) { /* unreadable: still Slurm's, with no job id to ask */
      json_decref(j->slurm);
      j->slurm = json_object();
    }
  }
  return j;
}

static int add_event(gs_store *st, const gs_job *j) {
  sqlite3_stmt *s = prepare(st, "INSERT INTO job_events VALUES(?, (julianday('now') - 2440587.5) * 86400.0, "
                                "?, ?)");
  if (!s)
    return db_error(st, "recording a job event");
  sqlite3_bind_int64(s, 1, j->id);
  sqlite3_bind_text(s, 2, gs_job_state_name(j->state), -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, j->reason, -1, SQLITE_TRANSIENT);
  return run_done(st, s, "recording a job event");
}

static int begin(gs_store *st) {
  return sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK
             ? GS_OK
             : db_error(st, "starting a transaction");
}

static int finish(gs_store *st, int rc) {
  if (rc == 0 && sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
    rc = db_error(st, "committing");
  if (rc < 0)
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
  return rc;
}

int gs_store_job_insert(gs_store *st, gs_job *j) {
  int rc = begin(st);
  if (rc < 0)
    return rc;
  sqlite3_stmt *s = prepare(st, "INSERT INTO jobs(" JOB_COLUMNS ") VALUES(NULL,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,?26,?27,?28,?29,?30,?31)");
  if (!s)
    return finish(st, db_error(st, "adding a job"));
  bind_job(s, j);
  rc = run_done(st, s, "adding a job");
  if (rc == 0) {
    j->id = sqlite3_last_insert_rowid(st->db);
    rc = add_event(st, j);
  }
  return finish(st, rc);
}

int gs_store_job_update(gs_store *st, const gs_job *j, bool event) {
  int rc = begin(st);
  if (rc < 0)
    return rc;
  sqlite3_stmt *s = prepare(
      st, "UPDATE jobs SET tenant=?2, name=?3, argv=?4, env=?5, chdir=?6, gpus=?7, gpu_mem=?8, "
          "gpu_share=?9, cpus=?10, host_mem=?11, time_limit=?12, priority=?13, requeue=?14, "
          "state=?15, reason=?16, submit_time=?17, start_time=?18, end_time=?19, pid=?20, "
          "pid_start=?21, exit_code=?22, signal=?23, devices=?24, runs=?25, cpu_seconds=?26, "
          "device_seconds=?27, device_mem_byte_seconds=?28, tenant_serial=?29, container=?30, slurm=?31 "
          "WHERE id=?1");
  if (!s)
    return finish(st, db_error(st, "updating a job"));
  sqlite3_bind_int64(s, 1, j->id);
  bind_job(s, j);
  rc = run_done(st, s, "updating a job");
  if (rc == 0 && event)
    rc = add_event(st, j);
  return finish(st, rc);
}

int gs_store_jobs_active(gs_store *st, gs_job ***out, int *n) {
  sqlite3_stmt *s = prepare(st, "SELECT " JOB_COLUMNS " FROM jobs WHERE state IN "
                                "('PENDING', 'RUNNING') ORDER BY id");
  if (!s)
    return db_error(st, "reading jobs");
  gs_job **all = NULL;
  int count = 0, rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    gs_job **grown = realloc(all, (size_t)(count + 1) * sizeof *all);
    gs_job *j = grown ? read_job(s) : NULL;
    if (grown)
      all = grown;
    if (!j) {
      for (int i = 0; i < count; i++)
        gs_job_free(all[i]);
      free(all);
      sqlite3_finalize(s);
      return gs_error(GS_ENOMEM, "out of memory reading jobs");
    }
    all[count++] = j;
  }
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) {
    for (int i = 0; i < count; i++)
      gs_job_free(all[i]);
    free(all);
    return db_error(st, "reading jobs");
  }
  *out = all;
  *n = count;
  return GS_OK;
}

int gs_store_job_get(gs_store *st, int64_t id, gs_job **out) {
  sqlite3_stmt *s = prepare(st, "SELECT " JOB_COLUMNS " FROM jobs WHERE id = ?");
  if (!s)
    return db_error(st, "reading a job");
  sqlite3_bind_int64(s, 1, id);
  int rc = sqlite3_step(s);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? gs_error(GS_ENOENT, "no job %lld", (long long)id)
                             : db_error(st, "reading a job");
  }
  gs_job *j = read_job(s);
  sqlite3_finalize(s);
  if (!j)
    return gs_error(GS_ENOMEM, "out of memory reading a job");
  *out = j;
  return GS_OK;
}

/* Room for element n of an array that grows by doubling; its capacity
 * follows from n alone (8, then each power of two), so it is not kept.
 * NULL when memory runs out (the array is then unchanged). */
static void *grow(void *arr, int n, size_t elem) {
  if (n > 0 && (n < 8 || (n & (n - 1)) != 0))
    return arr; /* room left */
  return realloc(arr, (size_t)(n == 0 ? 8 : 2 * n) * elem);
}

int gs_store_jobs_ended(gs_store *st, const char *tenant, int64_t serial, int limit,
                        gs_job_info **list, int *n) {
  *list = NULL;
  *n = 0;
  sqlite3_stmt *s = prepare(st, "SELECT " JOB_COLUMNS " FROM jobs WHERE (?1 IS NULL OR tenant = ?1)"
                                " AND (?3 = 0 OR tenant_serial = ?3)"
                                " AND state NOT IN ('PENDING', 'RUNNING')"
                                " ORDER BY id DESC LIMIT ?2");
  if (!s)
    return db_error(st, "listing jobs");
  if (tenant)
    sqlite3_bind_text(s, 1, tenant, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(s, 2, limit > 0 ? limit : -1);
  sqlite3_bind_int64(s, 3, serial);
  int rc = GS_OK;
  while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
    gs_job *j = read_job(s);
    gs_job_info *more = j ? grow(*list, *n, sizeof **list) : NULL;
    if (!more)
      rc = gs_error(GS_ENOMEM, "out of memory listing jobs");
    else if ((*list = more, rc = gs_job_fill_info(j, &more[*n])) == 0)
      (*n)++;
    gs_job_free(j);
  }
  sqlite3_finalize(s);
  if (rc < 0) {
    gs_job_infos_free(*list, *n);
    *list = NULL;
    *n = 0;
  }
  return rc;
}

int gs_store_jobs_ended_between(gs_store *st, double from, double to, int64_t **ids, int *n) {
  *ids = NULL;
  *n = 0;
  sqlite3_stmt *s = prepare(st, "SELECT id FROM jobs WHERE state NOT IN ('PENDING', 'RUNNING') "
                                "AND end_time >= ?1 AND end_time < ?2");
  if (!s)
    return db_error(st, "listing ended jobs");
  sqlite3_bind_double(s, 1, from);
  sqlite3_bind_double(s, 2, to);
  int rc = GS_OK;
  while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
    int64_t *more = grow(*ids, *n, sizeof **ids);
    if (!more) {
      rc = gs_error(GS_ENOMEM, "out of memory listing ended jobs");
      break;
    }
    *ids = more;
    more[(*n)++] = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  return rc;
}

int gs_store_job_events(gs_store *st, int64_t id, gs_job_event **out, int *n) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *s = prepare(st, "SELECT time, state, reason FROM job_events WHERE job = ? "
                                "ORDER BY rowid");
  if (!s)
    return db_error(st, "reading a job's events");
  sqlite3_bind_int64(s, 1, id);
  int rc = GS_OK;
  while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
    gs_job_event *more = grow(*out, *n, sizeof **out);
    if (!more) {
      rc = gs_error(GS_ENOMEM, "out of memory reading job %lld's events", (long long)id);
      break;
    }
    *out = more;
    gs_job_event *e = &more[(*n)++];
    e->time = sqlite3_column_double(s, 0);
    snprintf(e->state, sizeof e->state, "%s", text_col(s, 1));
    snprintf(e->reason, sizeof e->reason, "%s", text_col(s, 2));
  }
  sqlite3_finalize(s);
  return rc;
}

int gs_store_usage(gs_store *st, const char *tenant, int64_t serial, double since,
                   gs_usage_row **out, int *n) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *s = prepare(
      st, "SELECT tenant, count(*), sum(device_seconds), sum(device_mem_byte_seconds), "
          "sum(cpu_seconds), sum(max(end_time - start_time, 0)) FROM jobs "
          "WHERE start_time > 0 AND end_time >= ?2 AND state NOT IN ('PENDING', 'RUNNING') "
          "AND (?1 IS NULL OR tenant = ?1) AND (?3 = 0 OR tenant_serial = ?3) "
          "GROUP BY tenant ORDER BY tenant");
  if (!s)
    return db_error(st, "reading the accounting");
  if (tenant)
    sqlite3_bind_text(s, 1, tenant, -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(s, 2, since);
  sqlite3_bind_int64(s, 3, serial);
  int rc = GS_OK;
  while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
    gs_usage_row *more = grow(*out, *n, sizeof **out);
    if (!more) {
      rc = gs_error(GS_ENOMEM, "out of memory reading the accounting");
      break;
    }
    *out = more;
    gs_usage_row *u = &more[(*n)++];
    snprintf(u->tenant, sizeof u->tenant, "%s", text_col(s, 0));
    u->jobs = sqlite3_column_int64(s, 1);
    u->device_seconds = sqlite3_column_double(s, 2);
    u->device_mem_byte_seconds = sqlite3_column_double(s, 3);
    u->cpu_seconds = sqlite3_column_double(s, 4);
    u->wall_seconds = sqlite3_column_double(s, 5);
  }
  sqlite3_finalize(s);
  return rc;
}

int gs_store_job_last_id(gs_store *st, int64_t *out) {
  sqlite3_stmt *s = prepare(st, "SELECT max(coalesce((SELECT max(id) FROM jobs), 0), "
                                "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0))");
  if (!s)
    return db_error(st, "reading the last job id");
  int rc = sqlite3_step(s) == SQLITE_ROW ? GS_OK : db_error(st, "reading the last job id");
  *out = rc == 0 ? sqlite3_column_int64(s, 0) : 0;
  sqlite3_finalize(s);
  return rc;
}

int gs_store_job_ids_after(gs_store *st, int64_t id) {
  /* AUTOINCREMENT keeps its counter in sqlite_sequence, which may be written. */
  sqlite3_stmt *s = prepare(st, "UPDATE sqlite_sequence SET seq = max(seq, ?1) WHERE name = 'jobs'");
  if (!s)
    return db_error(st, "moving the job ids on");
  sqlite3_bind_int64(s, 1, id);
  int rc = run_done(st, s, "moving the job ids on");
  if (rc == 0 && sqlite3_changes(st->db) == 0) {
    s = prepare(st, "INSERT INTO sqlite_sequence(name, seq) VALUES('jobs', ?1)");
    if (!s)
      return db_error(st, "moving the job ids on");
    sqlite3_bind_int64(s, 1, id);
    rc = run_done(st, s, "moving the job ids on");
  }
  return rc;
}
