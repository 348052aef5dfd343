/* slurm_rest.c - slurmrestd's v0.0.38 API over libcurl, each call signed
 * with a JWT minted here for the job's user (slurm_rest.h). */
#include "sched/slurm_rest.h"

#include "base/error.h"
#include "base/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define API "/slurm/v0.0.38"
#define TOKEN_LIFETIME_S 120
#define CALL_TIMEOUT_S 20
#define CONNECT_TIMEOUT_S 5
#define MAX_REPLY ((size_t)16 << 20)

struct gs_slurm_rest {
  char base[600];   /* "http://host:port" (for a socket: "http://localhost") */
  char socket[512]; /* "" or slurmrestd's Unix socket */
  uint8_t key[1024];
  size_t key_len;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

/* The key, read with open/read (no stdio buffer keeps a copy). */
static int read_key(const char *path, uint8_t *key, size_t cap, size_t *len) {
  int f = open(path, O_RDONLY | O_CLOEXEC);
  if (f < 0)
    return gs_error(GS_EINVAL, "cannot open the Slurm JWT key %s: %s", path, strerror(errno));
  struct stat st;
  int rc = GS_OK;
  if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode))
    rc = gs_error(GS_EINVAL, "the Slurm JWT key %s is not a readable file", path);
  else if (st.st_mode & 077)
    rc = gs_error(GS_EINVAL, "the Slurm JWT key %s is readable by others (mode %03o): anyone "
                             "could act as any user; chmod 600 it", path,
                  (unsigned)(st.st_mode & 0777));
  else if (st.st_size < 16 || (uint64_t)st.st_size > cap)
    rc = gs_error(GS_EINVAL, "the Slurm JWT key %s holds %lld bytes; a key is 16 to %zu", path,
                  (long long)st.st_size, cap);
  ssize_t got = rc == 0 ? read(f, key, (size_t)st.st_size) : -1;
  if (rc == 0 && got != (ssize_t)st.st_size)
    rc = gs_error(GS_EINVAL, "cannot read the Slurm JWT key %s", path);
  close(f);
  *len = rc == 0 ? (size_t)got : 0;
  return rc;
}

int gs_slurm_rest_open(const char *url, const char *jwt_key_file, gs_slurm_rest **out) {
  *out = NULL;
  gs_slurm_rest *r = calloc(1, sizeof *r);
  if (!r)
    return gs_error(GS_ENOMEM, "out of memory for the Slurm client");
  int rc = GS_OK;
  if (strncmp(url, "unix:", 5) == 0 && url[5] == '/' && strlen(url + 5) < sizeof r->socket) {
    snprintf(r->socket, sizeof r->socket, "%s", url + 5);
    snprintf(r->base, sizeof r->base, "http://localhost");
  } else if ((strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0) &&
             strlen(url) < sizeof r->base) {
    snprintf(r->base, sizeof r->base, "%s", url);
    size_t n = strlen(r->base);
    while (n > 0 && r->base[n - 1] == '/')
      r->base[--n] = '\0';
  } else {
    rc = gs_error(GS_EINVAL, "slurmrestd's address is http://HOST:PORT or unix:/PATH, not '%s'",
                  url);
  }
  if (rc == 0)
    rc = read_key(jwt_key_file, r->key, sizeof r->key, &r->key_len);
  if (rc < 0) {
    gs_slurm_rest_close(r);
    return rc;
  }
  pthread_once(&curl_once, curl_init_once);
  *out = r;
  return GS_OK;
}

void gs_slurm_rest_close(gs_slurm_rest *r) {
  if (!r)
    return;
  OPENSSL_cleanse(r->key, sizeof r->key);
  free(r);
}

/* ---- the token ---------------------------------------------------------------------------- */

/* base64url without padding (RFC 7515's encoding of each part). */
static size_t base64url(const uint8_t *in, size_t n, char *out) {
  size_t len = (size_t)EVP_EncodeBlock((unsigned char *)out, in, (int)n);
  while (len > 0 && out[len - 1] == '=')
    len--;
  out[len] = '\0';
  for (size_t i = 0; i < len; i++)
    out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
  return len;
}

int gs_slurm_jwt(const uint8_t *key, size_t key_len, const char *user, int64_t now,
                 int lifetime_s, char *out, size_t cap) {
  json_t *claims = json_pack("{sIsIss}", "iat", (json_int_t)now, "exp",
                             (json_int_t)(now + lifetime_s), "sun", user);
  char *payload = claims ? json_dumps(claims, JSON_COMPACT) : NULL;
  json_decref(claims);
  if (!payload)
    return gs_error(GS_EINVAL, "cannot make a token for user '%s'", user);
  static const char header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
  size_t need = (sizeof header + strlen(payload) + 32) * 4 / 3 + 16;
  char *text = malloc(need);
  if (!text || need > cap) {
    free(text);
    free(payload);
    return gs_error(GS_EINVAL, "a token for user '%s' does not fit in %zu bytes", user, cap);
  }
  size_t n = base64url((const uint8_t *)header, sizeof header - 1, text);
  text[n++] = '.';
  n += base64url((const uint8_t *)payload, strlen(payload), text + n);
  free(payload);
  uint8_t mac[EVP_MAX_MD_SIZE];
  unsigned mac_len = 0;
  if (!HMAC(EVP_sha256(), key, (int)key_len, (const uint8_t *)text, n, mac, &mac_len)) {
    free(text);
    return gs_error(GS_EIO, "cannot sign a token (HMAC-SHA256)");
  }
  text[n++] = '.';
  base64url(mac, mac_len, text + n);
  snprintf(out, cap, "%s", text);
  free(text);
  return GS_OK;
}

/* ---- one call ----------------------------------------------------------------------------- */

typedef struct reply {
  char *data;
  size_t len;
  bool too_long;
} reply;

static size_t on_data(char *p, size_t size, size_t n, void *arg) {
  reply *r = arg;
  size_t add = size * n;
  if (r->len + add > MAX_REPLY) {
    r->too_long = true;
    return 0;
  }
  char *grown = realloc(r->data, r->len + add + 1);
  if (!grown)
    return 0;
  memcpy(grown + r->len, p, add);
  r->len += add;
  grown[r->len] = '\0';
  r->data = grown;
  return add;
}

/* Slurm's numbers for what a reply's errors mean here. */
#define SLURM_INVALID_JOB_ID 2017
#define SLURM_ALREADY_DONE 2021 /* a cancel of a job that has ended */
#define SLURM_PROTOCOL_AUTH_ERROR 5005 /* "Zero Bytes were transmitted": slurmctld refused */
#define ESLURM_INVALID_ACCOUNT 2045   /* no association of the user with the account */

/* Slurm's messages in a reply's "errors" list, joined ("" if none), and
 * the first one's number (0 if none). Entries carry it as error_number or
 * error_code, depending on where in slurmrestd they were made. */
static int slurm_errors(const json_t *body, char *out, size_t cap) {
  out[0] = '\0';
  size_t used = 0, i;
  int first = 0;
  json_t *e;
  json_array_foreach(json_object_get(body, "errors"), i, e) {
    json_t *num = json_object_get(e, "error_number");
    if (!json_is_integer(num))
      num = json_object_get(e, "error_code");
    if (!first && json_is_integer(num))
      first = (int)json_integer_value(num);
    const char *what = json_string_value(json_object_get(e, "error"));
    const char *detail = json_string_value(json_object_get(e, "description"));
    if (!what && !detail)
      continue;
    int n = snprintf(out + used, cap - used, "%s%s%s%s", used ? "; " : "", what ? what : "",
                     what && detail && detail[0] ? ": " : "", detail ? detail : "");
    if (n < 0 || (size_t)n >= cap - used)
      break;
    used += (size_t)n;
  }
  if (first == SLURM_PROTOCOL_AUTH_ERROR && used < cap)
    snprintf(out + used, cap - used, " (slurmctld refused the token: is --slurm-jwt-key the key "
                                     "slurm.conf names in AuthAltParameters?)");
  return first;
}

/* One request as `user`; *body is the parsed reply (the caller's to
 * decref), *status its HTTP status. */
static int call(gs_slurm_rest *r, const char *user, const char *method, const char *path,
                const json_t *request, long *status, json_t **body) {
  *body = NULL;
  char token[2048], header_user[300], header_token[2100], url[1200];
  if (gs_slurm_jwt(r->key, r->key_len, user, (int64_t)time(NULL), TOKEN_LIFETIME_S, token,
                   sizeof token) < 0)
    return gs_error_code();
  snprintf(header_user, sizeof header_user, "X-SLURM-USER-NAME: %s", user);
  snprintf(header_token, sizeof header_token, "X-SLURM-USER-TOKEN: %s", token);
  snprintf(url, sizeof url, "%s%s", r->base, path);
  char *text = request ? json_dumps(request, JSON_COMPACT) : NULL;
  OPENSSL_cleanse(token, sizeof token);
  CURL *h = curl_easy_init();
  struct curl_slist *headers = NULL;
  const char *lines[] = {header_user, header_token, "Content-Type: application/json",
                         "Accept: application/json"};
  bool listed = true;
  for (size_t i = 0; listed && i < sizeof lines / sizeof lines[0]; i++) {
    struct curl_slist *more = curl_slist_append(headers, lines[i]);
    listed = more != NULL;
    headers = more ? more : headers;
  }
  OPENSSL_cleanse(header_token, sizeof header_token);
  if (!h || !listed || (request && !text)) {
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    free(text);
    return gs_error(GS_ENOMEM, "out of memory for a call to slurmrestd");
  }
  reply rep = {0};
  curl_easy_setopt(h, CURLOPT_URL, url);
  if (r->socket[0])
    curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, r->socket);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  if (text)
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &rep);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)CALL_TIMEOUT_S);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_TIMEOUT_S);
  /* Tokens go to slurmrestd alone: never through a proxy from the
   * environment, nor to another scheme. */
  curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  CURLcode cc = curl_easy_perform(h);
  *status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(h);
  free(text);
  int rc = GS_OK;
  if (cc != CURLE_OK)
    rc = gs_error(GS_EIO, "slurmrestd at %s: %s", r->socket[0] ? r->socket : r->base,
                  rep.too_long ? "its reply is over 16 MiB" : curl_easy_strerror(cc));
  if (rc == 0) {
    *body = rep.data ? json_loads(rep.data, 0, NULL) : NULL;
    if (!json_is_object(*body)) {
      json_decref(*body);
      *body = NULL;
      /* A token slurmrestd refuses gets a bare 401 (no JSON). */
      rc = *status == 401 || *status == 403
               ? gs_error(GS_EPERM, "slurmrestd refused the token for user '%s' (HTTP %ld): "
                                    "is its JWT key the one slurm.conf names?", user, *status)
               : gs_error(GS_EIO, "slurmrestd answered HTTP %ld without JSON to %s %s", *status,
                          method, path);
    }
  }
  free(rep.data);
  return rc;
}

int gs_slurm_rest_submit(gs_slurm_rest *r, const char *user, json_t *job, int64_t *job_id) {
  long status;
  json_t *body;
  if (call(r, user, "POST", API "/job/submit", job, &status, &body) < 0)
    return gs_error_code();
  char errors[640];
  int first = slurm_errors(body, errors, sizeof errors);
  json_t *id = json_object_get(body, "job_id");
  int64_t given = json_is_integer(id) ? json_integer_value(id) : 0;
  json_decref(body);
  if (!errors[0] && given > 0) {
    *job_id = given;
    return GS_OK;
  }
  /* Slurm may queue a job and still object (more nodes than the partition
   * has: the job would wait for ever, PartitionConfig): that is a refusal
   * too, and the job it queued is cancelled. */
  if (given > 0 && gs_slurm_rest_cancel(r, user, given) < 0)
    GS_LOGW("sched", "Slurm job %lld, refused, could not be cancelled: %s", (long long)given,
            gs_error_detail());
  /* Slurm's communication errors (numbers 1000-1999) and a refused token
   * are the cluster's trouble, not the request's. */
  bool ours = first == SLURM_PROTOCOL_AUTH_ERROR || (first >= 1000 && first < 2000) ||
              (!errors[0] && given <= 0);
  const char *account = json_string_value(json_object_get(json_object_get(job, "job"),
                                                          "account"));
  char hint[300] = "";
  if (first == ESLURM_INVALID_ACCOUNT)
    snprintf(hint, sizeof hint, " (user %s has no association with account '%s' in Slurm's "
             "accounting: an admin adds it with sacctmgr, maps the tenant to another account "
             "with --slurm-accounts, or lets the daemon make it with --slurm-create-accounts)",
             user, account ? account : "");
  return gs_error(ours ? GS_EIO : GS_EINVAL, "Slurm refused the job: %s%s",
                  errors[0] ? errors : "no job id in slurmrestd's answer", hint);
}

static double time_of(const json_t *job, const char *key) {
  json_t *v = json_object_get(job, key);
  return json_is_integer(v) && json_integer_value(v) > 0 ? (double)json_integer_value(v) : 0;
}

/* A call on one job (GET or DELETE .../job/ID): its HTTP status, Slurm's
 * errors joined into `errors` and the first one's number; *body is the
 * reply, the caller's to decref. */
static int job_call(gs_slurm_rest *r, const char *user, const char *method, int64_t job_id,
                    long *status, json_t **body, char *errors, size_t cap, int *first) {
  char path[128];
  snprintf(path, sizeof path, API "/job/%lld", (long long)job_id);
  if (call(r, user, method, path, NULL, status, body) < 0)
    return gs_error_code();
  *first = slurm_errors(*body, errors, cap);
  return GS_OK;
}

int gs_slurm_rest_status(gs_slurm_rest *r, const char *user, int64_t job_id,
                         gs_slurm_status *out) {
  *out = (gs_slurm_status){.exit_code = -1};
  long status;
  json_t *body;
  char errors[640];
  int first = 0;
  if (job_call(r, user, "GET", job_id, &status, &body, errors, sizeof errors, &first) < 0)
    return gs_error_code();
  json_t *job = json_array_get(json_object_get(body, "jobs"), 0);
  const char *state = json_string_value(json_object_get(job, "job_state"));
  int rc = GS_OK;
  if (!state)
    rc = first == SLURM_INVALID_JOB_ID
             ? gs_error(GS_ENOENT, "Slurm no longer knows job %lld", (long long)job_id)
             : gs_error(GS_EIO, "slurmrestd said nothing of job %lld's state (HTTP %ld%s%s)",
                        (long long)job_id, status, errors[0] ? ": " : "", errors);
  if (rc == 0) {
    snprintf(out->state, sizeof out->state, "%s", state);
    const char *reason = json_string_value(json_object_get(job, "state_reason"));
    if (reason && strcmp(reason, "None") != 0)
      snprintf(out->reason, sizeof out->reason, "%s", reason);
    const char *nodes = json_string_value(json_object_get(job, "nodes"));
    snprintf(out->nodes, sizeof out->nodes, "%s", nodes ? nodes : "");
    out->start_time = time_of(job, "start_time");
    out->end_time = time_of(job, "end_time");
    json_t *restarts = json_object_get(job, "restart_cnt");
    out->restarts = json_is_integer(restarts) ? (int)json_integer_value(restarts) : 0;
    /* exit_code is the batch script's wait status. */
    json_t *code = json_object_get(job, "exit_code");
    if (json_is_integer(code) && out->end_time > 0) {
      int ws = (int)json_integer_value(code);
      out->signal = ws & 0x7f;
      out->exit_code = out->signal ? -1 : (ws >> 8) & 0xff;
    }
  }
  json_decref(body);
  return rc;
}

int gs_slurm_rest_cancel(gs_slurm_rest *r, const char *user, int64_t job_id) {
  long status;
  json_t *body;
  char errors[640];
  int first = 0;
  if (job_call(r, user, "DELETE", job_id, &status, &body, errors, sizeof errors, &first) < 0)
    return gs_error_code();
  json_decref(body);
  if ((!errors[0] && status == 200) || first == SLURM_ALREADY_DONE)
    return GS_OK;
  if (first == SLURM_INVALID_JOB_ID)
    return gs_error(GS_ENOENT, "Slurm does not know job %lld", (long long)job_id);
  return gs_error(GS_EIO, "Slurm did not cancel job %lld (HTTP %ld): %s", (long long)job_id,
                  status, errors[0] ? errors : "no reason given");
}
