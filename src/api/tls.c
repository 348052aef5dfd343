/* tls.c - the server's certificate, key and client CA (tls.h). */
#include "api/tls.h"

#include "base/error.h"
#include "base/log.h"

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHAIN_MAX 16 /* certificates in the server's chain, and read from a client */

/* What one reading of the files gave. */
typedef struct tls_identity {
  gnutls_pcert_st chain[CHAIN_MAX];
  unsigned n_chain;
  gnutls_privkey_t key;
  struct tls_identity *replaced; /* the one before a reload, kept till the end */
} tls_identity;

struct gs_tls {
  char cert_path[4096], key_path[4096], ca_path[4096];
  char *client_ca_pem;
  /* The CAs client certificates must chain to, read once: libmicrohttpd
   * announces the bundle it was given at start to clients, so a new one
   * takes a restart. NULL: clients need no certificate. */
  gnutls_x509_trust_list_t client_trust;
  _Atomic(tls_identity *) current;
  pthread_mutex_t reload_lock;
};

static _Atomic(gs_tls *) serving_tls; /* the callback's: GnuTLS gives it no user pointer */

static void identity_free(tls_identity *id) {
  while (id) {
    tls_identity *older = id->replaced;
    for (unsigned i = 0; i < id->n_chain; i++)
      gnutls_pcert_deinit(&id->chain[i]);
    if (id->key)
      gnutls_privkey_deinit(id->key);
    free(id);
    id = older;
  }
}

static int read_pem(const char *flag, const char *path, gnutls_datum_t *out) {
  int rc = gnutls_load_file(path, out);
  if (rc < 0)
    return gs_error(GS_EIO, "%s %s: cannot read it (%s)", flag, path, gnutls_strerror(rc));
  return GS_OK;
}

/* Logs a certificate that is out of date: clients will refuse it. */
static void warn_if_out_of_date(const char *path, const gnutls_datum_t *pem) {
  gnutls_x509_crt_t crt;
  if (gnutls_x509_crt_init(&crt) < 0)
    return;
  if (gnutls_x509_crt_import(crt, pem, GNUTLS_X509_FMT_PEM) == 0) {
    time_t now = time(NULL), from = gnutls_x509_crt_get_activation_time(crt),
           until = gnutls_x509_crt_get_expiration_time(crt);
    char when[64];
    struct tm tm;
    if (until != (time_t)-1 && now > until) {
      strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&until, &tm));
      GS_LOGW("tls", "the certificate in %s expired on %s: clients will refuse it; replace "
                     "it and send SIGHUP", path, when);
    } else if (from != (time_t)-1 && now < from) {
      strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&from, &tm));
      GS_LOGW("tls", "the certificate in %s is valid only from %s", path, when);
    }
  }
  gnutls_x509_crt_deinit(crt);
}

/* The certificate and key must be readable PEM and belong together; GnuTLS's
 * own loader says so in one call. */
static int check_pair(const gs_tls *t, const gnutls_datum_t *cert, const gnutls_datum_t *key) {
  gnutls_certificate_credentials_t cred;
  if (gnutls_certificate_allocate_credentials(&cred) < 0)
    return gs_error(GS_ENOMEM, "cannot allocate TLS credentials");
  int rc = gnutls_certificate_set_x509_key_mem2(cred, cert, key, GNUTLS_X509_FMT_PEM, NULL, 0);
  gnutls_certificate_free_credentials(cred);
  if (rc < 0)
    return gs_error(GS_EINVAL, "--tls-cert %s with --tls-key %s: %s", t->cert_path, t->key_path,
                    gnutls_strerror(rc));
  return GS_OK;
}

/* The client CA bundle, read once: its text for libmicrohttpd, and the
 * trust list client certificates are checked against. */
static int load_client_trust(gs_tls *t) {
  if (!t->ca_path[0])
    return GS_OK;
  gnutls_datum_t ca = {0};
  int rc = read_pem("--tls-client-ca", t->ca_path, &ca);
  if (rc == 0 && !(t->client_ca_pem = strndup((const char *)ca.data, ca.size)))
    rc = gs_error(GS_ENOMEM, "out of memory");
  if (rc == 0 && gnutls_x509_trust_list_init(&t->client_trust, 0) < 0) {
    t->client_trust = NULL;
    rc = gs_error(GS_ENOMEM, "cannot allocate a trust list");
  }
  int n = rc < 0 ? 0 : gnutls_x509_trust_list_add_trust_mem(t->client_trust, &ca, NULL,
                                                             GNUTLS_X509_FMT_PEM, 0, 0);
  gnutls_free(ca.data);
  if (rc < 0)
    return rc;
  if (n <= 0)
    return gs_error(GS_EINVAL, "--tls-client-ca %s: %s", t->ca_path,
                    n < 0 ? gnutls_strerror(n) : "it holds no certificate");
  return GS_OK;
}

/* Reads the files into a new identity; the caller frees it. */
static int load_identity(const gs_tls *t, tls_identity **out) {
  tls_identity *id = calloc(1, sizeof *id);
  gnutls_datum_t cert = {0}, key = {0};
  if (!id)
    return gs_error(GS_ENOMEM, "out of memory");
  int rc = read_pem("--tls-cert", t->cert_path, &cert);
  if (rc == 0)
    rc = read_pem("--tls-key", t->key_path, &key);
  if (rc == 0)
    rc = check_pair(t, &cert, &key);
  if (rc == 0) {
    id->n_chain = CHAIN_MAX;
    int g = gnutls_pcert_list_import_x509_raw(id->chain, &id->n_chain, &cert,
                                              GNUTLS_X509_FMT_PEM, 0);
    if (g < 0) {
      id->n_chain = 0;
      rc = gs_error(GS_EINVAL, "--tls-cert %s: %s (at most %d certificates)", t->cert_path,
                    gnutls_strerror(g), CHAIN_MAX);
    }
  }
  if (rc == 0 && (gnutls_privkey_init(&id->key) < 0 ||
                  gnutls_privkey_import_x509_raw(id->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0) < 0))
    rc = gs_error(GS_EINVAL, "--tls-key %s: not a private key in PEM", t->key_path);
  if (rc == 0)
    warn_if_out_of_date(t->cert_path, &cert);
  gnutls_free(cert.data);
  if (key.data)
    memset(key.data, 0, key.size); /* the key stays only inside GnuTLS's own object */
  gnutls_free(key.data);
  if (rc < 0) {
    identity_free(id);
    return rc;
  }
  *out = id;
  return GS_OK;
}

int gs_tls_open(const char *cert, const char *key, const char *client_ca, gs_tls **out) {
  gs_tls *t = calloc(1, sizeof *t);
  if (!t)
    return gs_error(GS_ENOMEM, "out of memory");
  snprintf(t->cert_path, sizeof t->cert_path, "%s", cert);
  snprintf(t->key_path, sizeof t->key_path, "%s", key);
  snprintf(t->ca_path, sizeof t->ca_path, "%s", client_ca ? client_ca : "");
  pthread_mutex_init(&t->reload_lock, NULL);
  tls_identity *id = NULL;
  int rc = load_identity(t, &id);
  if (rc == 0)
    rc = load_client_trust(t);
  if (rc < 0) {
    identity_free(id);
    gs_tls_free(t);
    return rc;
  }
  atomic_store(&t->current, id);
  atomic_store(&serving_tls, t);
  *out = t;
  return GS_OK;
}

void gs_tls_free(gs_tls *t) {
  if (!t)
    return;
  gs_tls *expected = t;
  atomic_compare_exchange_strong(&serving_tls, &expected, NULL);
  identity_free(atomic_load(&t->current));
  if (t->client_trust)
    gnutls_x509_trust_list_deinit(t->client_trust, 1);
  free(t->client_ca_pem);
  pthread_mutex_destroy(&t->reload_lock);
  free(t);
}

int gs_tls_reload(gs_tls *t) {
  tls_identity *id = NULL;
  pthread_mutex_lock(&t->reload_lock);
  int rc = load_identity(t, &id);
  if (rc == 0) {
    id->replaced = atomic_load(&t->current);
    atomic_store(&t->current, id);
  }
  pthread_mutex_unlock(&t->reload_lock);
  return rc;
}

static int retrieve_certificate(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn,
                                int nreqs, const gnutls_pk_algorithm_t *pk_algos,
                                int pk_algos_length, gnutls_pcert_st **pcert,
                                unsigned int *pcert_length, gnutls_privkey_t *privkey) {
  (void)session, (void)req_ca_rdn, (void)nreqs, (void)pk_algos, (void)pk_algos_length;
  gs_tls *t = atomic_load(&serving_tls);
  if (!t)
    return -1;
  tls_identity *id = atomic_load(&t->current);
  *pcert = id->chain;
  *pcert_length = id->n_chain;
  *privkey = id->key;
  return 0;
}

void *gs_tls_cert_callback(void) {
  gnutls_certificate_retrieve_function2 *fn = retrieve_certificate;
  return (void *)fn;
}

const char *gs_tls_client_ca_pem(const gs_tls *t) {
  return t->client_ca_pem;
}

bool gs_tls_client_allowed(gs_tls *t, void *session, char *why, size_t why_cap) {
  if (!t->client_trust)
    return true;
  unsigned n = 0;
  const gnutls_datum_t *peers = session ? gnutls_certificate_get_peers(session, &n) : NULL;
  if (!peers || n == 0) {
    snprintf(why, why_cap, "this server needs a client certificate signed by its "
                           "--tls-client-ca");
    return false;
  }
  if (n > CHAIN_MAX)
    n = CHAIN_MAX;
  gnutls_x509_crt_t crts[CHAIN_MAX];
  unsigned imported = 0;
  for (; imported < n; imported++) {
    if (gnutls_x509_crt_init(&crts[imported]) < 0)
      break;
    if (gnutls_x509_crt_import(crts[imported], &peers[imported], GNUTLS_X509_FMT_DER) < 0) {
      gnutls_x509_crt_deinit(crts[imported]);
      break;
    }
  }
  /* A certificate for clients: one whose key purposes leave out client
   * authentication (a server's) is refused. */
  gnutls_typed_vdata_st purpose = {.type = GNUTLS_DT_KEY_PURPOSE_OID,
                                   .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT};
  unsigned status = 0;
  int rc = imported == n ? gnutls_x509_trust_list_verify_crt2(t->client_trust, crts, n, &purpose,
                                                              1, 0, &status, NULL)
                         : GNUTLS_E_CERTIFICATE_ERROR;
  for (unsigned i = 0; i < imported; i++)
    gnutls_x509_crt_deinit(crts[i]);
  if (rc < 0) {
    snprintf(why, why_cap, "client certificate refused: %s", gnutls_strerror(rc));
    return false;
  }
  if (status) {
    gnutls_datum_t text = {0};
    gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text, 0);
    snprintf(why, why_cap, "client certificate refused: %s",
             text.data ? (const char *)text.data : "it does not verify");
    gnutls_free(text.data);
    return false;
  }
  return true;
}
