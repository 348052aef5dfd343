/* cpu_telemetry.c - live figures of the host CPU: utilization from /proc/stat
 * deltas, memory from /proc/meminfo and the process's cgroup (v2 or v1),
 * temperature from hwmon or thermal zones, power from RAPL energy counters.
 * A source the machine does not have leaves its field "not available". */
#include "hal/cpu/cpu_internal.h"

#include "base/clock.h"
#include "base/fileutil.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsers ----------------------------------------------------------------- */

int gs__cpu_parse_stat(const char *text, uint64_t *busy, uint64_t *total) {
  /* First line: "cpu  user nice system idle iowait irq softirq steal guest guest_nice".
   * guest time is already counted in user, so it is not added again. */
  unsigned long long v[8] = {0};
  int n = sscanf(text, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                 &v[4], &v[5], &v[6], &v[7]);
  if (n < 4)
    return gs_error(GS_EIO, "/proc/stat: no aggregate \"cpu\" line");
  uint64_t idle = v[3] + v[4];
  uint64_t work = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  *busy = work;
  *total = work + idle;
  return GS_OK;
}

static int meminfo_field(const char *text, const char *key, uint64_t *out) {
  size_t klen = strlen(key);
  for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
    if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
      unsigned long long kb;
      if (sscanf(line + klen + 1, "%llu", &kb) != 1)
        return gs_error(GS_EIO, "/proc/meminfo: unreadable %s", key);
      *out = (uint64_t)kb * 1024;
      return GS_OK;
    }
  }
  return gs_error(GS_ENOENT, "/proc/meminfo: no %s line", key);
}

int gs__cpu_parse_meminfo(const char *text, uint64_t *total, uint64_t *available) {
  int rc = meminfo_field(text, "MemTotal", total);
  if (rc < 0)
    return rc;
  if (meminfo_field(text, "MemAvailable", available) == 0)
    return GS_OK;
  /* Kernels before 3.14 have no MemAvailable: approximate it. */
  uint64_t mfree = 0, buffers = 0, cached = 0;
  rc = meminfo_field(text, "MemFree", &mfree);
  if (rc < 0)
    return rc;
  meminfo_field(text, "Buffers", &buffers);
  meminfo_field(text, "Cached", &cached);
  *available = mfree + buffers + cached;
  return GS_OK;
}

int gs__cpu_parse_cgroup(const char *text, const char *controller, char *path, size_t cap) {
  /* Lines: "hierarchy-id:controller[,controller...]:path"; v2 has "0::path". */
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    const char *c1 = memchr(line, ':', len);
    const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
    if (c2) {
      size_t clen = (size_t)(c2 - c1 - 1);
      bool match = false;
      if (*controller == '\0')
        match = clen == 0;
      else
        for (const char *p = c1 + 1; p < c2;) {
          const char *comma = memchr(p, ',', (size_t)(c2 - p));
          size_t n = comma ? (size_t)(comma - p) : (size_t)(c2 - p);
          if (n == strlen(controller) && strncmp(p, controller, n) == 0)
            match = true;
          p += n + 1;
        }
      if (match) {
        size_t plen = len - (size_t)(c2 + 1 - line);
        if (plen + 1 > cap)
          return gs_error(GS_ERANGE, "cgroup path too long");
        memcpy(path, c2 + 1, plen);
        path[plen] = '\0';
        return GS_OK;
      }
    }
    line = end ? end + 1 : NULL;
  }
  return gs_error(GS_ENOENT, "no %s cgroup line", *controller ? controller : "v2");
}

uint64_t gs__energy_delta(uint64_t prev, uint64_t cur, uint64_t range) {
  if (cur >= prev)
    return cur - prev;
  /* The counter wrapped once (reads are far more frequent than wraps). */
  return range > prev ? range - prev + cur : cur;
}

/* ---- cgroup memory ------------------------------------------------------------ */

/* "inactive_file N" style field of a memory.stat file; 0 if absent. */
static uint64_t stat_field(const char *path, const char *key) {
  char buf[8192];
  if (gs_read_text_file(path, buf, sizeof buf) < 0)
    return 0;
  size_t klen = strlen(key);
  for (char *line = buf; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
    if (strncmp(line, key, klen) == 0 && line[klen] == ' ')
      return strtoull(line + klen + 1, NULL, 10);
  return 0;
}

/* Tries <dir>/<limit_file> and <dir>/<usage_file>. The working set is usage
 * less inactive page cache, the figure kubelet and docker report. */
static int cgroup_dir_memory(const char *dir, const char *limit_file, const char *usage_file,
                             const char *inactive_key, uint64_t *limit, uint64_t *used) {
  char path[700];
  char buf[64];
  snprintf(path, sizeof path, "%s/%s", dir, limit_file);
  if (gs_read_text_file(path, buf, sizeof buf) < 0)
    return GS_ENOENT;
  if (strncmp(buf, "max", 3) == 0)
    return GS_ENOENT; /* v2: no limit */
  uint64_t lim = strtoull(buf, NULL, 10);
  snprintf(path, sizeof path, "%s/%s", dir, usage_file);
  uint64_t usage;
  if (gs_read_u64_file(path, &usage) < 0)
    return GS_ENOENT;
  snprintf(path, sizeof path, "%s/memory.stat", dir);
  uint64_t inactive = stat_field(path, inactive_key);
  *limit = lim;
  *used = usage > inactive ? usage - inactive : usage;
  return GS_OK;
}

int gs__cpu_cgroup_memory(const char *proc_root, const char *sys_root, uint64_t *limit,
                          uint64_t *used) {
  char text[4096], path[512], dir[800];
  snprintf(path, sizeof path, "%s/self/cgroup", proc_root);
  if (gs_read_text_file(path, text, sizeof text) < 0)
    return GS_ENOENT;
  char cg[512];
  /* v1 memory controller first: where it exists it is what limits us. */
  if (gs__cpu_parse_cgroup(text, "memory", cg, sizeof cg) == 0) {
    snprintf(dir, sizeof dir, "%s/fs/cgroup/memory%s", sys_root, cg);
    if (cgroup_dir_memory(dir, "memory.limit_in_bytes", "memory.usage_in_bytes",
                          "total_inactive_file", limit, used) == 0)
      return GS_OK;
    /* In a container the namespace root is mounted, not the host's path. */
    snprintf(dir, sizeof dir, "%s/fs/cgroup/memory", sys_root);
    if (cgroup_dir_memory(dir, "memory.limit_in_bytes", "memory.usage_in_bytes",
                          "total_inactive_file", limit, used) == 0)
      return GS_OK;
  }
  if (gs__cpu_parse_cgroup(text, "", cg, sizeof cg) == 0) {
    snprintf(dir, sizeof dir, "%s/fs/cgroup%s", sys_root, strcmp(cg, "/") == 0 ? "" : cg);
    if (cgroup_dir_memory(dir, "memory.max", "memory.current", "inactive_file", limit, used) == 0)
      return GS_OK;
    snprintf(dir, sizeof dir, "%s/fs/cgroup", sys_root);
    if (cgroup_dir_memory(dir, "memory.max", "memory.current", "inactive_file", limit, used) == 0)
      return GS_OK;
  }
  return GS_ENOENT;
}

/* ---- temperature ---------------------------------------------------------------- */

static bool name_in(const char *name, const char *const *list) {
  for (; *list; list++)
    if (strcmp(name, *list) == 0)
      return true;
  return false;
}

static void chomp(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
    s[--n] = '\0';
}

/* Reads a millidegree file into the running maximum; false if unreadable. */
static bool take_hottest(const char *path, long long *best, bool *found) {
  char buf[64];
  if (gs_read_text_file(path, buf, sizeof buf) < 0)
    return false;
  long long mc = strtoll(buf, NULL, 10);
  if (!*found || mc > *best)
    *best = mc;
  *found = true;
  return true;
}

/* Whether <dir>/<entry>/<file> holds one of `names` (one line). */
static bool names_match(const char *dir, const char *entry, const char *file,
                        const char *const *names) {
  char path[1024], buf[64];
  snprintf(path, sizeof path, "%s/%s/%s", dir, entry, file);
  if (gs_read_text_file(path, buf, sizeof buf) < 0)
    return false;
  chomp(buf);
  return name_in(buf, names);
}

/* Hottest CPU sensor in millidegrees, from hwmon chips known to measure the
 * CPU, else from CPU thermal zones. Returns 0 or GS_ENOENT. */
static int read_temperature_mc(const char *sys_root, long long *out) {
  static const char *const hwmon_chips[] = {"coretemp", "k10temp", "zenpower", "cpu_thermal",
                                            "soc_thermal", NULL};
  static const char *const zones[] = {"x86_pkg_temp", "cpu-thermal", "cpu_thermal",
                                      "soc-thermal", "soc_thermal", NULL};
  char dirpath[512], path[1024];
  long long best = 0;
  bool found = false;

  snprintf(dirpath, sizeof dirpath, "%s/class/hwmon", sys_root);
  DIR *d = opendir(dirpath);
  for (struct dirent *de; d && (de = readdir(d));) {
    if (de->d_name[0] == '.' || !names_match(dirpath, de->d_name, "name", hwmon_chips))
      continue;
    for (int i = 1; i <= 64; i++) {
      snprintf(path, sizeof path, "%s/%s/temp%d_input", dirpath, de->d_name, i);
      take_hottest(path, &best, &found);
    }
  }
  if (d)
    closedir(d);

  if (!found) {
    snprintf(dirpath, sizeof dirpath, "%s/class/thermal", sys_root);
    d = opendir(dirpath);
    for (struct dirent *de; d && (de = readdir(d));) {
      if (strncmp(de->d_name, "thermal_zone", 12) != 0 ||
          !names_match(dirpath, de->d_name, "type", zones))
        continue;
      snprintf(path, sizeof path, "%s/%s/temp", dirpath, de->d_name);
      take_hottest(path, &best, &found);
    }
    if (d)
      closedir(d);
  }
  if (!found)
    return GS_ENOENT;
  *out = best;
  return GS_OK;
}

/* ---- RAPL ----------------------------------------------------------------------- */

/* Finds the package domains: powercap/intel-rapl:N (AMD's are named so too),
 * not their sub-domains intel-rapl:N:M. Counters that cannot be read (they
 * are root-only on current kernels) mean power is not available. */
static void rapl_discover(gs_cpu_telemetry_state *st) {
  char dirpath[512], path[1024];
  snprintf(dirpath, sizeof dirpath, "%s/class/powercap", st->sys_root);
  DIR *d = opendir(dirpath);
  for (struct dirent *de; d && (de = readdir(d)) && st->rapl_count < GS_CPU_MAX_RAPL;) {
    unsigned pkg;
    char extra;
    if (sscanf(de->d_name, "intel-rapl:%u%c", &pkg, &extra) != 1)
      continue;
    int i = st->rapl_count;
    snprintf(st->rapl_dir[i], sizeof st->rapl_dir[i], "%s/%s", dirpath, de->d_name);
    snprintf(path, sizeof path, "%s/max_energy_range_uj", st->rapl_dir[i]);
    uint64_t range, energy;
    if (gs_read_u64_file(path, &range) < 0)
      continue;
    snprintf(path, sizeof path, "%s/energy_uj", st->rapl_dir[i]);
    if (gs_read_u64_file(path, &energy) < 0)
      continue;
    st->max_energy_uj[i] = range;
    st->prev_energy_uj[i] = energy;
    st->rapl_count++;
  }
  if (d)
    closedir(d);
}

/* ---- the reader ---------------------------------------------------------------- */

void gs__cpu_telemetry_init(gs_cpu_telemetry_state *st, const char *proc_root,
                            const char *sys_root) {
  memset(st, 0, sizeof *st);
  snprintf(st->proc_root, sizeof st->proc_root, "%s", proc_root);
  snprintf(st->sys_root, sizeof st->sys_root, "%s", sys_root);
  pthread_mutex_init(&st->lock, NULL);
}

void gs__cpu_telemetry_destroy(gs_cpu_telemetry_state *st) { pthread_mutex_destroy(&st->lock); }

static int sample_stat(gs_cpu_telemetry_state *st, uint64_t *busy, uint64_t *total) {
  char path[512], text[512];
  snprintf(path, sizeof path, "%s/stat", st->proc_root);
  if (gs_read_text_file(path, text, sizeof text) < 0)
    return GS_EIO;
  return gs__cpu_parse_stat(text, busy, total);
}

/* Sums the energy used by every package since the previous sample. */
static uint64_t sample_energy(gs_cpu_telemetry_state *st, bool *ok) {
  char path[1024];
  uint64_t used = 0;
  *ok = st->rapl_count > 0;
  for (int i = 0; i < st->rapl_count; i++) {
    uint64_t e;
    snprintf(path, sizeof path, "%s/energy_uj", st->rapl_dir[i]);
    if (gs_read_u64_file(path, &e) < 0) {
      *ok = false;
      continue;
    }
    used += gs__energy_delta(st->prev_energy_uj[i], e, st->max_energy_uj[i]);
    st->prev_energy_uj[i] = e;
  }
  return used;
}

int gs__cpu_telemetry_read(gs_cpu_telemetry_state *st, uint64_t first_interval_ns,
                           gs_telemetry *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&st->lock);

  if (!st->have_prev) {
    if (!st->rapl_discovered) {
      rapl_discover(st);
      st->rapl_discovered = true;
      st->prev_energy_time_ns = gs_now_ns();
    }
    if (sample_stat(st, &st->prev_busy, &st->prev_total) == 0) {
      st->prev_time_ns = gs_now_ns();
      st->have_prev = true;
      gs_sleep_ns(first_interval_ns);
    }
  }

  uint64_t busy, total;
  uint64_t now = gs_now_ns();
  if (st->have_prev && sample_stat(st, &busy, &total) == 0) {
    if (total > st->prev_total && busy >= st->prev_busy) {
      st->last_util = 100.0 * (double)(busy - st->prev_busy) / (double)(total - st->prev_total);
      st->have_util = true;
    }
    /* No tick since the previous call (callers interleave: the daemon's
     * history, /metrics, smi): the latest measurement still stands. */
    if (st->have_util) {
      out->utilization_percent = st->last_util;
      out->valid |= GS_TM_UTILIZATION;
    }
    /* Keep the previous sample when no tick passed, so that quick repeated
     * calls still measure over a real interval. */
    if (total > st->prev_total) {
      st->prev_busy = busy;
      st->prev_total = total;
      st->prev_time_ns = now;
    }
  }
  bool energy_ok;
  uint64_t uj = sample_energy(st, &energy_ok);
  if (energy_ok && now > st->prev_energy_time_ns) {
    out->power_w = (double)uj / 1e6 / ((double)(now - st->prev_energy_time_ns) / 1e9);
    out->valid |= GS_TM_POWER;
    st->prev_energy_time_ns = now;
  }
  pthread_mutex_unlock(&st->lock);

  char path[512], text[4096];
  snprintf(path, sizeof path, "%s/meminfo", st->proc_root);
  uint64_t mem_total, mem_avail;
  if (gs_read_text_file(path, text, sizeof text) >= 0 &&
      gs__cpu_parse_meminfo(text, &mem_total, &mem_avail) == 0) {
    uint64_t limit, used;
    if (gs__cpu_cgroup_memory(st->proc_root, st->sys_root, &limit, &used) == 0 &&
        limit < mem_total) {
      out->memory_total_bytes = limit;
      out->memory_used_bytes = used < limit ? used : limit;
    } else {
      out->memory_total_bytes = mem_total;
      out->memory_used_bytes = mem_total > mem_avail ? mem_total - mem_avail : 0;
    }
    out->memory_free_bytes = out->memory_total_bytes - out->memory_used_bytes;
    out->valid |= GS_TM_MEMORY;
  }

  long long mc;
  if (read_temperature_mc(st->sys_root, &mc) == 0) {
    out->temperature_c = (double)mc / 1000.0;
    out->valid |= GS_TM_TEMPERATURE;
  }
  return GS_OK;
}
