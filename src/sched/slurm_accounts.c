/* slurm_accounts.c - see slurm_accounts.h. */
#include "sched/slurm_accounts.h"

#include "base/error.h"
#include "base/log.h"
#include "base/run.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MADE 256 /* (account, user) pairs remembered; more are made again */
#define NAME_MAX_LEN 64

typedef struct made_account {
  char account[NAME_MAX_LEN], user[NAME_MAX_LEN];
  int shares;
} made_account;

struct gs_slurm_accounts {
  char *map;
  char *sacctmgr; /* NULL: accounts are not created */
  pthread_mutex_t lock;
  made_account made[MAX_MADE];
  int n_made;
};

int gs_slurm_accounts_create(const char *map, const char *sacctmgr, gs_slurm_accounts **out) {
  gs_slurm_accounts *a = calloc(1, sizeof *a);
  if (!a)
    return gs_error(GS_ENOMEM, "out of memory for the Slurm accounts");
  pthread_mutex_init(&a->lock, NULL);
  a->map = strdup(map ? map : "");
  a->sacctmgr = sacctmgr ? strdup(sacctmgr) : NULL;
  if (!a->map || (sacctmgr && !a->sacctmgr)) {
    gs_slurm_accounts_free(a);
    return gs_error(GS_ENOMEM, "out of memory for the Slurm accounts");
  }
  *out = a;
  return GS_OK;
}

void gs_slurm_accounts_free(gs_slurm_accounts *a) {
  if (!a)
    return;
  pthread_mutex_destroy(&a->lock);
  free(a->map);
  free(a->sacctmgr);
  free(a);
}

int gs_slurm_shares(double weight) {
  double shares = isnan(weight) ? 1 : round(weight * 100);
  return shares < 1 ? 1 : shares > 1e6 ? 1000000 : (int)shares;
}

/* Its entry in the map ("tenant=account,..."), else the tenant's own name. */
static int account_name(const char *map, const char *tenant, char *out, size_t cap) {
  const char *name = tenant;
  size_t name_len = strlen(tenant), tn = strlen(tenant);
  for (const char *p = map; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > tn + 1 && strncmp(p, tenant, tn) == 0 && p[tn] == '=') {
      name = p + tn + 1;
      name_len = len - tn - 1;
    }
    p = end ? end + 1 : p + len;
  }
  if (name_len >= cap || name_len >= NAME_MAX_LEN)
    return gs_error(GS_EINVAL, "tenant '%s''s Slurm account is %zu bytes; at most %d", tenant,
                    name_len, (int)(cap < NAME_MAX_LEN ? cap : NAME_MAX_LEN) - 1);
  /* sacctmgr splits on ',', '=' and blanks; Slurm keeps names in lower case. */
  for (size_t i = 0; i < name_len; i++) {
    char c = name[i];
    if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') &&
        !strchr("_-.", c))
      return gs_error(GS_EINVAL, "tenant '%s''s Slurm account '%.*s' is not letters, digits, "
                      "'_', '-' and '.'", tenant, (int)name_len, name);
    out[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
  }
  out[name_len] = '\0';
  return GS_OK;
}

/* Runs `sacctmgr -i ARGS...`, killed after 20 s (a slurmdbd that does not
 * answer must not hold the request, and the accounts' lock, for ever). Its
 * exit status, or the error; what it printed, on one line, into `said`. */
static int run_sacctmgr(const gs_slurm_accounts *a, const char *const *args, char *said,
                        size_t cap) {
  char *argv[16] = {a->sacctmgr, "-i"};
  int n = 2;
  for (int i = 0; args[i] && n < 15; i++)
    argv[n++] = (char *)args[i];
  argv[n] = NULL;
  gs_run_options o = {.errors_too = true, .timeout_s = 20};
  int rc = gs_run_capture(argv, &o, said, cap, NULL);
  if (rc < 0)
    snprintf(said, cap, "%s", gs_error_detail());
  for (char *c = said; *c; c++)
    if (*c == '\n' || *c == '\t')
      *c = ' ';
  size_t used = strlen(said);
  while (used && said[used - 1] == ' ')
    said[--used] = '\0';
  return rc;
}

/* sacctmgr exits 1 with "Nothing new added." for what exists already, and
 * with "Nothing modified" for shares set to what they are. */
static bool made_or_there(int rc, const char *said) {
  return rc == 0 ||
         (rc == 1 && (strstr(said, "Nothing new added") || strstr(said, "Nothing modified")));
}

/* One sacctmgr step; `what` and `whom` name it in the refusal. *created
 * (may be NULL) says whether it made something rather than finding it. */
static int sacctmgr_step(const gs_slurm_accounts *a, const char *const *argv, const char *what,
                         const char *whom, bool *created) {
  char said[512], exit_code[32] = "";
  int rc = run_sacctmgr(a, argv, said, sizeof said);
  if (rc >= 0)
    snprintf(exit_code, sizeof exit_code, " (exit %d)", rc);
  if (!made_or_there(rc, said))
    return gs_error(GS_EIO, "sacctmgr could not %s %s%s: %s", what, whom, exit_code,
                    said[0] ? said : "no output");
  if (created)
    *created = rc == 0;
  return GS_OK;
}

/* The account with its shares, and the user's association in it; for a
 * pair made before by this daemon (made_before), only the new shares. An
 * account made now has its shares already; one found there gets them set.
 * With the lock held. */
static int make_account(const gs_slurm_accounts *a, const char *account, const char *user,
                        int shares, bool made_before) {
  char fairshare[32], name[96], user_arg[96], account_arg[96], user_in[200];
  snprintf(fairshare, sizeof fairshare, "fairshare=%d", shares);
  snprintf(name, sizeof name, "name=%s", account);
  snprintf(user_arg, sizeof user_arg, "name=%s", user);
  snprintf(account_arg, sizeof account_arg, "account=%s", account);
  snprintf(user_in, sizeof user_in, "%s to account %s", user, account);
  const char *add_account[] = {"add", "account", name, fairshare,
                               "description=gpusrv tenant account", "organization=gpusrv", NULL};
  const char *set_shares[] = {"modify", "account", "where", name, "set", fairshare, NULL};
  const char *add_user[] = {"add", "user", user_arg, account_arg, NULL};
  bool created = false;
  int rc = made_before ? GS_OK
                       : sacctmgr_step(a, add_account, "create account", account, &created);
  if (rc == 0 && !created)
    rc = sacctmgr_step(a, set_shares, "set the shares of account", account, NULL);
  if (rc == 0 && !made_before)
    rc = sacctmgr_step(a, add_user, "add user", user_in, NULL);
  if (rc == 0)
    GS_LOGI("slurm", "account %s (fair-share shares %d) holds user %s", account, shares, user);
  return rc;
}

int gs_slurm_account_for(gs_slurm_accounts *a, const char *tenant, const char *user,
                         double weight, char *out, size_t cap) {
  if (account_name(a->map, tenant, out, cap) < 0)
    return gs_error_code();
  if (!a->sacctmgr)
    return GS_OK;
  /* sacctmgr splits on ',', '=' and blanks. */
  bool plain = user[0] && strlen(user) < NAME_MAX_LEN;
  for (const char *c = user; plain && *c; c++)
    plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
            strchr("._@-", *c);
  if (!plain)
    return gs_error(GS_EINVAL, "Unix user '%s' cannot be named to sacctmgr (1 to %d letters, "
                    "digits, '.', '_', '@' and '-')", user, NAME_MAX_LEN - 1);
  int shares = gs_slurm_shares(weight);
  pthread_mutex_lock(&a->lock);
  made_account *m = NULL;
  for (int i = 0; i < a->n_made && !m; i++)
    if (!strcmp(a->made[i].account, out) && !strcmp(a->made[i].user, user))
      m = &a->made[i];
  int rc = GS_OK;
  if (!m || m->shares != shares)
    rc = make_account(a, out, user, shares, m != NULL);
  if (rc == 0 && !m && a->n_made < MAX_MADE)
    m = &a->made[a->n_made++];
  if (rc == 0 && m) {
    snprintf(m->account, sizeof m->account, "%s", out);
    snprintf(m->user, sizeof m->user, "%s", user);
    m->shares = shares;
  }
  pthread_mutex_unlock(&a->lock);
  return rc;
}
