/* cmd_top.c - `gpusrv top`: a live full-screen view of a daemon (ncurses),
 * in nvtop's manner: each device's utilization and memory as bars with a
 * history of utilization, its temperature and power; the running jobs; the
 * served models' request rates and latencies; the queue with why each job
 * waits. Everything comes from the daemon's routes (/api/v1/devices,
 * /api/v1/jobs, /v2/models/stats), so it watches a remote daemon as well. */
#include "api/latency.h"
#include "cli/cli.h"
#include "cli/daemon.h"

#include "base/error.h"
#include "base/units.h"

#include <curses.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef struct top_opts {
  gs_cli_daemon_opts daemon;
  double interval;
  long long iterations;
} top_opts;

static const gs_cli_option top_options[] = {
    {"interval", 0, GS_OPT_REAL, offsetof(top_opts, interval), "S",
     "Seconds between refreshes (default 1)", 0.1, 3600},
    {"iterations", 0, GS_OPT_INT, offsetof(top_opts, iterations), "N",
     "Stop after N refreshes (default: until q)", 1, 1000000000},
    GS_CLI_DAEMON_ROWS(top_opts),
    GS_CLI_OPTIONS_END,
};

/* ---- what the daemon says, and what top keeps between refreshes ---------------- */

#define HISTORY 240 /* utilization samples kept per device */
#define MAX_DEVICES 64
#define MAX_MODELS 256

typedef struct device_history {
  char id[64];
  float util[HISTORY]; /* NAN: not measured */
  int count, next;
} device_history;

typedef struct model_counts {
  char name[128];
  long long success, success_ns, queue_ns;
  uint64_t latency[GS_LATENCY_BUCKETS]; /* the daemon's histogram (latency.h), since its start */
} model_counts;

/* A model's row as drawn: figures over the last refresh ("-": none), and
 * the requests waiting now. */
typedef struct model_row {
  char name[128], rate[16], p50[16], mean[16], queue[16];
  long long inferences, waiting;
} model_row;

typedef enum { SORT_ID, SORT_TENANT, SORT_STATE, SORT_TIME, SORT_COUNT } sort_key;
static const char *const sort_names[SORT_COUNT] = {"id", "tenant", "state", "time"};

typedef struct top_state {
  const top_opts *o;
  gs_client *client;
  json_t *devices, *jobs, *stats; /* the latest answers (NULL: none) */
  json_t *events;                 /* the devices' health changes, oldest first */
  char error[256];                /* why the latest refresh failed ("": it did not) */
  device_history hist[MAX_DEVICES];
  int n_hist;
  model_counts prev[MAX_MODELS];
  int n_prev;
  model_row rows[MAX_MODELS]; /* from the last two polls; drawing does not change them */
  int n_rows;
  double prev_at, at;
  sort_key sort;
  char tenant[128]; /* "" all */
  int device;       /* -1 all, else the index of the device picked */
} top_state;

static const char *str(json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : "";
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static device_history *history_of(top_state *s, const char *id) {
  for (int i = 0; i < s->n_hist; i++)
    if (strcmp(s->hist[i].id, id) == 0)
      return &s->hist[i];
  if (s->n_hist == MAX_DEVICES)
    return NULL;
  device_history *h = &s->hist[s->n_hist++];
  snprintf(h->id, sizeof h->id, "%s", id);
  return h;
}

static void record_history(top_state *s) {
  size_t i;
  json_t *d;
  json_array_foreach(s->devices, i, d) {
    device_history *h = history_of(s, str(d, "id"));
    json_t *u = json_object_get(json_object_get(d, "telemetry"), "utilization");
    if (!h)
      continue;
    h->util[h->next] = json_is_number(u) ? (float)json_number_value(u) : NAN;
    h->next = (h->next + 1) % HISTORY;
    h->count += h->count < HISTORY;
  }
}

/* One GET; on failure the reason goes to s->error. */
static json_t *fetch(top_state *s, const char *path, const char *key) {
  json_t *answer = NULL;
  char *body = NULL;
  if (gs_client_request(s->client, "GET", path, NULL, &body) != GS_OK)
    snprintf(s->error, sizeof s->error, "%s", gs_client_last_error(s->client));
  else if (!(answer = json_loads(body, 0, NULL)))
    snprintf(s->error, sizeof s->error, "%s: the daemon's answer is not JSON", path);
  free(body);
  json_t *want = answer ? json_incref(json_object_get(answer, key)) : NULL;
  json_decref(answer);
  return want;
}

static void count_models(top_state *s);

static void poll_daemon(top_state *s) {
  json_decref(s->devices);
  json_decref(s->jobs);
  s->error[0] = '\0';
  s->devices = fetch(s, "/api/v1/devices?all=1", "devices");
  s->jobs = s->devices ? fetch(s, "/api/v1/jobs", "jobs") : NULL;
  json_t *stats = s->jobs ? fetch(s, "/v2/models/stats", "model_stats") : NULL;
  if (!s->devices) { /* unreachable: no stale events beside the error */
    json_decref(s->events);
    s->events = NULL;
  } else { /* a daemon from before health events has no such route: none shown */
    char saved[sizeof s->error];
    snprintf(saved, sizeof saved, "%s", s->error);
    json_decref(s->events);
    s->events = fetch(s, "/api/v1/events", "events");
    snprintf(s->error, sizeof s->error, "%s", saved);
  }
  if (stats || !s->error[0]) { /* keep the previous counts when the daemon has no models route */
    json_decref(s->stats);
    s->stats = stats;
  }
  s->prev_at = s->at;
  s->at = now_seconds();
  if (s->devices)
    record_history(s);
  count_models(s);
}

/* ---- drawing ------------------------------------------------------------------------ */

/* "[|||||     42%]" in `width` columns. */
static void bar(int y, int x, int width, double fraction, const char *label) {
  int inner = width - 2, fill = isfinite(fraction) ? (int)lround(fraction * inner) : 0;
  fill = fill < 0 ? 0 : fill > inner ? inner : fill;
  mvaddch(y, x, '[');
  for (int i = 0; i < inner; i++)
    mvaddch(y, x + 1 + i, i < fill ? '|' : ' ');
  mvaddch(y, x + width - 1, ']');
  int len = (int)strlen(label);
  if (len < inner)
    mvaddstr(y, x + width - 1 - len, label);
}

/* The last `width` utilization samples, oldest left, from "_" (idle) to
 * "@" (busy); "?" where it was not measured. */
static void sparkline(int y, int x, int width, const device_history *h) {
  static const char levels[] = "_.:-=+*#%@";
  for (int i = 0; i < width; i++) {
    int back = width - i; /* samples ago */
    char ch = ' ';
    if (h && back <= h->count) {
      float u = h->util[(h->next - back + HISTORY) % HISTORY];
      ch = isnan(u) ? '?' : levels[(int)fminf(9.0f, fmaxf(0.0f, u / 100.0f * 9.0f + 0.5f))];
    }
    mvaddch(y, x + i, ch);
  }
}

/* The newest health changes, up to `max` lines: "12:01:02 cuda0 healthy ->
 * degraded: PCIe link at x8 of x16". */
static int draw_events(top_state *s, int y, int max) {
  size_t n = json_array_size(s->events), first = n > (size_t)max ? n - (size_t)max : 0;
  if (n == 0)
    return y;
  attron(A_BOLD);
  mvprintw(y++, 0, "HEALTH EVENTS");
  attroff(A_BOLD);
  for (size_t i = n; i > first && y < LINES - 2; i--) {
    json_t *e = json_array_get(s->events, i - 1);
    time_t at = (time_t)json_number_value(json_object_get(e, "time"));
    char when[16];
    strftime(when, sizeof when, "%H:%M:%S", localtime(&at));
    bool bad = strcmp(str(e, "health"), "healthy") != 0;
    if (bad)
      attron(A_BOLD);
    mvprintw(y++, 0, "%s %-9.9s %s -> %s: %.*s", when, str(e, "device"), str(e, "previous"),
             str(e, "health"), COLS > 50 ? COLS - 50 : 0, str(e, "reason"));
    attroff(A_BOLD);
  }
  return y;
}

static int draw_devices(top_state *s, int y) {
  attron(A_BOLD);
  mvprintw(y++, 0, "DEVICES");
  attroff(A_BOLD);
  size_t i;
  json_t *d;
  json_array_foreach(s->devices, i, d) {
    if (y >= LINES - 2)
      break;
    json_t *t = json_object_get(d, "telemetry");
    double total = json_number_value(json_object_get(d, "memory_total"));
    json_t *used = json_object_get(t, "memory_used"), *util = json_object_get(t, "utilization");
    json_t *temp = json_object_get(t, "temperature_c"), *power = json_object_get(t, "power_w");
    char label[48], a[16], b[16], temp_s[16] = "  -", power_s[16] = "   -";
    if ((int)i == s->device)
      attron(A_REVERSE);
    mvprintw(y, 0, "%-9.9s %-16.16s", str(d, "id"), str(d, "name"));
    attroff(A_REVERSE);
    int x = 27, bw = COLS >= 120 ? 24 : 16;
    snprintf(label, sizeof label, json_is_number(util) ? "%.0f%%" : "n/a",
             json_number_value(util));
    bar(y, x, bw, json_number_value(util) / 100.0, label);
    x += bw + 1;
    gs_format_bytes((uint64_t)json_number_value(used), a, sizeof a);
    gs_format_bytes((uint64_t)total, b, sizeof b);
    snprintf(label, sizeof label, json_is_number(used) ? "%s/%s" : "n/a", a, b);
    if ((int)strlen(label) >= bw - 2) /* too narrow for both: what is used */
      snprintf(label, sizeof label, json_is_number(used) ? "%s" : "n/a", a);
    bar(y, x, bw, total > 0 ? json_number_value(used) / total : NAN, label);
    x += bw + 1;
    if (json_is_number(temp))
      snprintf(temp_s, sizeof temp_s, "%3.0fC", json_number_value(temp));
    if (json_is_number(power))
      snprintf(power_s, sizeof power_s, "%4.0fW", json_number_value(power));
    if (COLS - x >= 11) /* narrower: the bars alone */
      mvprintw(y, x, "%s %s", temp_s, power_s);
    x += 11;
    if (COLS - x > 4)
      sparkline(y, x, COLS - x - 1, history_of(s, str(d, "id")));
    y++;
  }
  return y;
}

/* Whether a job shows under the tenant and device picked. */
static bool job_shown(const top_state *s, json_t *j) {
  if (s->tenant[0] && strcmp(str(j, "tenant"), s->tenant) != 0)
    return false;
  if (s->device < 0)
    return true;
  const char *dev = str(json_array_get(s->devices, (size_t)s->device), "id");
  size_t len = strlen(dev);
  for (const char *p = str(j, "devices"); *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0))
    if (strncmp(p, dev, len) == 0 && (p[len] == ',' || p[len] == '\0'))
      return true; /* a whole id of the comma list: cuda1 is not cuda10 */
  return false;
}

static sort_key g_sort; /* for qsort's comparator */

static int compare_jobs(const void *pa, const void *pb) {
  json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
  switch (g_sort) {
  case SORT_TENANT: return strcmp(str(a, "tenant"), str(b, "tenant"));
  case SORT_STATE: return strcmp(str(a, "state"), str(b, "state"));
  case SORT_TIME: {
    double x = json_number_value(json_object_get(a, "start_time"));
    double y = json_number_value(json_object_get(b, "start_time"));
    return (x > y) - (x < y);
  }
  default: {
    json_int_t x = json_integer_value(json_object_get(a, "id"));
    json_int_t y = json_integer_value(json_object_get(b, "id"));
    return (x > y) - (x < y);
  }
  }
}

/* The jobs in one state group (running: "running" and "suspended" ...;
 * queued: "pending"), sorted, from row y. */
static int draw_jobs(top_state *s, int y, bool queued) {
  size_t n = json_array_size(s->jobs), k = 0;
  json_t **rows = calloc(n ? n : 1, sizeof *rows);
  if (!rows)
    return y;
  for (size_t i = 0; i < n; i++) {
    json_t *j = json_array_get(s->jobs, i);
    bool pending = strcasecmp(str(j, "state"), "pending") == 0;
    if (pending == queued && job_shown(s, j))
      rows[k++] = j;
  }
  g_sort = s->sort;
  qsort(rows, k, sizeof *rows, compare_jobs);
  bool wide = COLS >= 100;
  attron(A_BOLD);
  mvprintw(y++, 0, queued ? "QUEUE (%zu)" : "JOBS (%zu running)", k);
  if (queued)
    mvprintw(y++, 0, "%6s %-12s %-16s %s", "ID", "TENANT", "NAME", "WAITING BECAUSE");
  else if (wide)
    mvprintw(y++, 0, "%6s %-12s %-16s %-10s %-16s %9s %10s", "ID", "TENANT", "NAME", "STATE",
             "DEVICES", "TIME", "GPU MEM");
  else
    mvprintw(y++, 0, "%6s %-10s %-12s %-9s %-12s %9s", "ID", "TENANT", "NAME", "STATE", "DEVICES",
             "TIME");
  attroff(A_BOLD);
  for (size_t i = 0; i < k && y < LINES - 1; i++) {
    json_t *j = rows[i];
    long long id = (long long)json_integer_value(json_object_get(j, "id"));
    char took[32], mem[16];
    gs_cli_job_elapsed(j, took, sizeof took);
    gs_format_bytes((uint64_t)json_number_value(json_object_get(j, "gpu_mem")), mem, sizeof mem);
    if (queued)
      mvprintw(y++, 0, "%6lld %-12.12s %-16.16s %.*s", id, str(j, "tenant"), str(j, "name"),
               COLS > 38 ? COLS - 38 : 0, str(j, "reason"));
    else if (wide)
      mvprintw(y++, 0, "%6lld %-12.12s %-16.16s %-10.10s %-16.16s %9s %10s", id, str(j, "tenant"),
               str(j, "name"), str(j, "state"), str(j, "devices"), took, mem);
    else
      mvprintw(y++, 0, "%6lld %-10.10s %-12.12s %-9.9s %-12.12s %9s", id, str(j, "tenant"),
               str(j, "name"), str(j, "state"), str(j, "devices"), took);
  }
  free(rows);
  return y;
}

static long long count_of(json_t *model, const char *what, const char *field) {
  json_t *is = json_object_get(json_object_get(model, "inference_stats"), what);
  return (long long)json_integer_value(json_object_get(is, field));
}

/* Each model's requests per second and mean latencies over the last
 * poll, from the change in the daemon's cumulative counts. */
static void count_models(top_state *s) {
  double dt = s->at - s->prev_at;
  model_counts now[MAX_MODELS];
  int n_now = 0;
  size_t i;
  json_t *m;
  json_array_foreach(s->stats, i, m) {
    if (n_now == MAX_MODELS)
      break;
    model_counts *c = &now[n_now++];
    snprintf(c->name, sizeof c->name, "%s", str(m, "name"));
    c->success = count_of(m, "success", "count");
    c->success_ns = count_of(m, "success", "ns");
    c->queue_ns = count_of(m, "queue", "ns");
    json_t *counts = json_object_get(json_object_get(m, "latency_histogram"), "counts");
    for (int b = 0; b < GS_LATENCY_BUCKETS; b++)
      c->latency[b] = (uint64_t)json_integer_value(json_array_get(counts, (size_t)b));
    const model_counts *p = NULL;
    for (int k = 0; k < s->n_prev; k++)
      if (strcmp(s->prev[k].name, c->name) == 0)
        p = &s->prev[k];
    model_row *row = &s->rows[n_now - 1];
    snprintf(row->name, sizeof row->name, "%s", c->name);
    snprintf(row->rate, sizeof row->rate, "-");
    snprintf(row->p50, sizeof row->p50, "-");
    snprintf(row->mean, sizeof row->mean, "-");
    snprintf(row->queue, sizeof row->queue, "-");
    row->inferences = c->success;
    row->waiting = json_integer_value(json_object_get(m, "queue_length"));
    long long dn = p ? c->success - p->success : 0;
    if (p && dt > 0)
      snprintf(row->rate, sizeof row->rate, "%.1f", (double)dn / dt);
    if (dn > 0) {
      snprintf(row->mean, sizeof row->mean, "%.2f",
               (double)(c->success_ns - p->success_ns) / dn / 1e6);
      snprintf(row->queue, sizeof row->queue, "%.2f", (double)(c->queue_ns - p->queue_ns) / dn / 1e6);
      uint64_t recent[GS_LATENCY_BUCKETS];
      for (int b = 0; b < GS_LATENCY_BUCKETS; b++)
        recent[b] = c->latency[b] >= p->latency[b] ? c->latency[b] - p->latency[b] : 0;
      double p50 = gs_latency_quantile_us(recent, 0.5);
      if (isfinite(p50))
        snprintf(row->p50, sizeof row->p50, "%.2f", p50 / 1e3);
    }
  }
  memcpy(s->prev, now, sizeof now[0] * (size_t)n_now);
  s->n_prev = s->n_rows = n_now;
}

static int draw_models(top_state *s, int y) {
  attron(A_BOLD);
  mvprintw(y++, 0, "MODELS (%d)", s->n_rows);
  mvprintw(y++, 0, "%-22s %7s %8s %8s %7s %8s %11s", "NAME", "REQ/S", "P50 MS", "MEAN MS",
           "WAITING", "QUEUE MS", "INFERENCES");
  attroff(A_BOLD);
  for (int i = 0; i < s->n_rows && y < LINES - 1; i++) {
    const model_row *r = &s->rows[i];
    mvprintw(y++, 0, "%-22.22s %7s %8s %8s %7lld %8s %11lld", r->name, r->rate, r->p50, r->mean,
             r->waiting, r->queue, r->inferences);
  }
  return y;
}

static void draw(top_state *s) {
  erase();
  char clock[16];
  time_t t = time(NULL);
  strftime(clock, sizeof clock, "%H:%M:%S", localtime(&t));
  const char *dev = s->device < 0 ? "all" : str(json_array_get(s->devices, (size_t)s->device), "id");
  attron(A_REVERSE);
  mvprintw(0, 0, "%-*s", COLS, "");
  mvprintw(0, 0, " gpusrv top  %.40s  %s  every %.1fs", gs_client_url(s->client), clock,
           s->o->interval);
  attroff(A_REVERSE);
  mvprintw(1, 0, " q quit   s sort: %s   t tenant: %s   d device: %s", sort_names[s->sort],
           s->tenant[0] ? s->tenant : "all", dev);
  int y = 3;
  if (s->error[0]) {
    attron(A_BOLD);
    mvprintw(y, 0, "daemon unreachable or refusing: %.*s", COLS > 34 ? COLS - 34 : 0, s->error);
    attroff(A_BOLD);
    y += 2;
  }
  if (s->devices)
    y = draw_devices(s, y) + 1;
  if (json_array_size(s->events) && y < LINES - 4)
    y = draw_events(s, y, 3) + 1;
  if (s->jobs && y < LINES - 2)
    y = draw_jobs(s, y, false) + 1;
  if (y < LINES - 2)
    y = draw_models(s, y) + 1;
  if (s->jobs && y < LINES - 2)
    draw_jobs(s, y, true);
  refresh();
}

/* ---- keys ------------------------------------------------------------------------- */

/* The next tenant among the jobs' after the one picked ("" all comes
 * after the last). */
static void next_tenant(top_state *s) {
  const char *best = NULL;
  size_t i;
  json_t *j;
  json_array_foreach(s->jobs, i, j) {
    const char *t = str(j, "tenant");
    if (t[0] && strcmp(t, s->tenant) > 0 && (!best || strcmp(t, best) < 0))
      best = t;
  }
  snprintf(s->tenant, sizeof s->tenant, "%s", best ? best : "");
}

static volatile sig_atomic_t stop_requested;
static void on_stop(int sig) {
  (void)sig;
  stop_requested = 1;
}

/* Reads keys until the next refresh is due; false once asked to quit. */
static bool handle_keys(top_state *s, double until) {
  while (!stop_requested) {
    double left = until - now_seconds();
    if (left <= 0)
      return true;
    timeout((int)(left * 1000) + 1);
    int ch = getch();
    switch (ch) {
    case 'q': case 'Q': return false;
    case 's': s->sort = (sort_key)((s->sort + 1) % SORT_COUNT); draw(s); break;
    case 't': next_tenant(s); draw(s); break;
    case 'd': {
      int n = (int)json_array_size(s->devices);
      s->device = s->device + 1 < n ? s->device + 1 : -1;
      draw(s);
      break;
    }
    case KEY_RESIZE: draw(s); break;
    default: break;
    }
  }
  return false;
}

static int top_run(int argc, char **argv) {
  top_opts o = {.interval = 1.0};
  gs_cli_args args;
  int rc = gs_cli_parse(&gs_cli_top, argc, argv, &o, &args);
  if (rc != GS_EXIT_OK)
    return rc;
  if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
    gs_cli_error("top: needs a terminal (for text, use gpusrv jobs, gpusrv models, "
                 "or curl /api/v1/devices)");
    return GS_EXIT_FAILED;
  }
  top_state *s = calloc(1, sizeof *s);
  if (!s) {
    gs_cli_error("top: out of memory");
    return GS_EXIT_FAILED;
  }
  s->o = &o;
  s->device = -1;
  if (!(s->client = gs_cli_client("top", o.daemon.url, o.daemon.token))) {
    free(s);
    return GS_EXIT_FAILED;
  }
  struct sigaction sa = {.sa_handler = on_stop};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  if (!initscr()) {
    gs_cli_error("top: this terminal cannot be driven (TERM=%s)", getenv("TERM"));
    gs_client_close(s->client);
    free(s);
    return GS_EXIT_FAILED;
  }
  cbreak();
  noecho();
  keypad(stdscr, TRUE);
  curs_set(0);
  for (long long i = 0; !stop_requested && (!o.iterations || i < o.iterations); i++) {
    poll_daemon(s);
    draw(s);
    if (!handle_keys(s, s->at + o.interval))
      break;
  }
  endwin();
  gs_client_close(s->client);
  json_decref(s->devices);
  json_decref(s->jobs);
  json_decref(s->stats);
  json_decref(s->events);
  free(s);
  return GS_EXIT_OK;
}

const gs_cli_command gs_cli_top = {
    .name = "top",
    .usage = "gpusrv top [--interval S] [--iterations N] [--url URL]",
    .about = "A live view of a daemon, local or remote: each device's utilization and memory\n"
             "with a history of utilization, its temperature and power; the running jobs;\n"
             "the served models' requests per second and mean latencies over the last\n"
             "refresh; the devices' latest health changes; and the queue, with why each job\n"
             "waits. Keys: q quits, s changes the\n"
             "jobs' order, t shows one tenant's jobs (then the next, then all), d picks a\n"
             "device (its jobs only). Narrow terminals (80 columns) get fewer columns.",
    .options = top_options,
    .run = top_run,
};
