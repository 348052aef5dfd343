/* tls.h - the server's TLS identity for libmicrohttpd (GnuTLS underneath):
 * its certificate chain and key, read from files and read again on SIGHUP
 * without dropping a connection, and, where a client CA is given, the check
 * that a client presented a certificate that CA signed and that is in date.
 *
 * The certificate is handed to each handshake by a callback, so a reload
 * swaps a pointer. */
#ifndef GS_API_TLS_H
#define GS_API_TLS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gs_tls gs_tls;

/* Reads the certificate chain (PEM), its private key (PEM) and, when
 * client_ca is non-empty, the CA bundle (PEM) client certificates must chain
 * to. Fails with a message naming the file and what is wrong: unreadable, not
 * PEM, or a key that does not match the certificate. *out is freed by
 * gs_tls_free. An expired or not yet valid certificate is logged, not
 * refused (clients will refuse it, and an operator can replace it and
 * send SIGHUP). */
int gs_tls_open(const char *cert, const char *key, const char *client_ca, gs_tls **out);
void gs_tls_free(gs_tls *tls);

/* Reads the certificate and key again. On success new handshakes use them;
 * on failure (message in gs_error_detail) the previous ones stay. Each
 * reload keeps the replaced pair (a few KB) until gs_tls_free, since a
 * handshake may be using it. The client CA bundle is read once: a new one
 * takes a restart (libmicrohttpd names its CAs to clients as given at
 * start). */
int gs_tls_reload(gs_tls *tls);

/* The certificate callback to give libmicrohttpd as
 * MHD_OPTION_HTTPS_CERT_CALLBACK (a gnutls_certificate_retrieve_function2).
 * GnuTLS passes no user pointer to it, so it serves the process's one
 * gs_tls: the last one opened. */
void *gs_tls_cert_callback(void);

/* The client CA bundle's text (for MHD_OPTION_HTTPS_MEM_TRUST, which makes
 * libmicrohttpd ask clients for a certificate), or NULL when none was given.
 * Owned by tls. */
const char *gs_tls_client_ca_pem(const gs_tls *tls);

/* Whether the client of a TLS session (a gnutls_session_t) presented a
 * certificate that chains to the client CA and is in date. True when no
 * client CA was given. Otherwise false, with the reason in why. */
bool gs_tls_client_allowed(gs_tls *tls, void *session, char *why, size_t why_cap);

#endif
