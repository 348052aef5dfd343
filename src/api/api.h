/* api.h - the application interface: `gpusrv serve`, an HTTP server of the
 * KServe v2 inference protocol over the model repository. */
#ifndef GS_API_H
#define GS_API_H

#include "base/config.h"

#include <stdbool.h>
#include <stdint.h>

/* The settings of `gpusrv serve`, filled from gs_serve_options. */
typedef struct gs_serve_settings {
  char host[GS_CONFIG_STR];
  int64_t http_port;
  int64_t grpc_port; /* 0: none */
  char model_repository[GS_CONFIG_STR];
  char state_dir[GS_CONFIG_STR];
  int64_t max_request_bytes;
  int64_t max_bodies_bytes;
  int64_t max_connections_per_client;
  int64_t http_threads;
  int64_t grpc_pollers, grpc_threads;
  int64_t drain_seconds;
  int64_t model_memory_limit;
  char auth[GS_CONFIG_STR];
  char job_devices[GS_CONFIG_STR];
  int64_t kill_grace_seconds;
  int64_t job_pids_max;
  char preemption[GS_CONFIG_STR];
  bool reset_state;
  int64_t job_log_max;
  char job_retention[GS_CONFIG_STR];
  double job_default_cpus;
  int64_t job_default_mem;
  char allowed_images[GS_CONFIG_STR];
  char cdi_spec[GS_CONFIG_STR];
  char slurm_rest_url[GS_CONFIG_STR];
  char slurm_jwt_key[GS_CONFIG_STR];
  char slurm_accounts[GS_CONFIG_STR];
  bool slurm_create_accounts;
  bool container_host_network;
  bool pull_images;
  char tls_cert[GS_CONFIG_STR];
  char tls_key[GS_CONFIG_STR];
  char tls_client_ca[GS_CONFIG_STR];
  bool insecure_listen;
  double model_load_timeout; /* seconds */
  double history_interval;   /* seconds between the dashboard's telemetry samples */
  double history_seconds;    /* how far back they go */
} gs_serve_settings;

/* The one table every way of setting them derives from. */
extern const gs_config_option gs_serve_options[];

/* Runs the server until SIGINT or SIGTERM (SIGHUP reads the TLS files again), then lets requests in flight
 * finish (up to drain_seconds) and returns 0; or returns an error when it
 * cannot start (port taken, repository unreadable). */
int gs_serve(const gs_serve_settings *settings);

#endif
