/* test_cpu_telemetry.c - the CPU backend's telemetry readers on fixture
 * trees shaped like /proc and /sys: utilization deltas, memory with and
 * without cgroup limits (v1 and v2), temperature sources, RAPL power and its
 * counter wraparound, and "not available" where a source is missing. */
#include "harness.h"

#include "base/clock.h"
#include "hal/cpu/cpu_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

/* Writes `text` to root/relpath, creating directories on the way. */
__attribute__((format(printf, 2, 3))) static void put(const char *relpath, const char *fmt, ...) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", root, relpath);
  for (char *p = path + strlen(root) + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0755);
      *p = '/';
    }
  FILE *f = fopen(path, "w");
  CHECK_MSG(f != NULL, "cannot write %s", path);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
}

static void make_root(void) {
  snprintf(root, sizeof root, "/tmp/gs-telemetry-XXXXXX");
  CHECK(mkdtemp(root) != NULL);
  put("proc/stat", "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 100 0 100 800 0 0 0 0 0 0\n");
  put("proc/meminfo", "MemTotal:       16777216 kB\nMemFree:  1000 kB\nMemAvailable:    4194304 kB\n");
  put("proc/self/cgroup", "0::/\n");
}

static void remove_root(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CHECK_EQ(system(cmd), 0);
}

/* A telemetry reader over the fixture tree. */
static void open_state(gs_cpu_telemetry_state *st) {
  char proc[300], sys[300];
  snprintf(proc, sizeof proc, "%s/proc", root);
  snprintf(sys, sizeof sys, "%s/sys", root);
  gs__cpu_telemetry_init(st, proc, sys);
}

/* One read by a fresh reader. */
static void read_tm(gs_telemetry *t) {
  gs_cpu_telemetry_state st;
  open_state(&st);
  CHECK_OK(gs__cpu_telemetry_read(&st, 1000, t));
  gs__cpu_telemetry_destroy(&st);
}

static void parse_stat(void) {
  uint64_t busy, total;
  CHECK_OK(gs__cpu_parse_stat("cpu  10 2 3 100 5 1 1 1 7 0\n", &busy, &total));
  CHECK_EQ(busy, 10 + 2 + 3 + 1 + 1 + 1); /* guest (7) is inside user already */
  CHECK_EQ(total, busy + 100 + 5);
  CHECK_ERR(gs__cpu_parse_stat("intr 1 2 3\n", &busy, &total), GS_EIO);
}

static void parse_meminfo(void) {
  uint64_t total, avail;
  CHECK_OK(gs__cpu_parse_meminfo("MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailable: 600 kB\n",
                                 &total, &avail));
  CHECK_EQ(total, 1000 * 1024);
  CHECK_EQ(avail, 600 * 1024);
  /* Old kernels: no MemAvailable, so free + buffers + cached. */
  CHECK_OK(gs__cpu_parse_meminfo("MemTotal: 1000 kB\nMemFree: 10 kB\nBuffers: 5 kB\nCached: 20 kB\n",
                                 &total, &avail));
  CHECK_EQ(avail, 35 * 1024);
  CHECK_ERR(gs__cpu_parse_meminfo("nothing here\n", &total, &avail), GS_ENOENT);
}

static void parse_cgroup(void) {
  const char *v1 = "12:cpu,cpuacct:/a\n4:memory:/process_api/abc\n0::/\n";
  char path[128];
  CHECK_OK(gs__cpu_parse_cgroup(v1, "memory", path, sizeof path));
  CHECK_STR(path, "/process_api/abc");
  CHECK_OK(gs__cpu_parse_cgroup(v1, "cpuacct", path, sizeof path));
  CHECK_STR(path, "/a");
  CHECK_OK(gs__cpu_parse_cgroup(v1, "", path, sizeof path));
  CHECK_STR(path, "/");
  CHECK_ERR(gs__cpu_parse_cgroup("0::/x\n", "memory", path, sizeof path), GS_ENOENT);
  CHECK_ERR(gs__cpu_parse_cgroup("garbage", "", path, sizeof path), GS_ENOENT);
}

static void energy_wraparound(void) {
  CHECK_EQ(gs__energy_delta(100, 250, 1000), 150);
  CHECK_EQ(gs__energy_delta(900, 50, 1000), 150); /* wrapped at 1000 */
  CHECK_EQ(gs__energy_delta(5, 5, 1000), 0);
}

static void memory_without_limit(void) {
  make_root();
  gs_telemetry t;
  read_tm(&t);
  CHECK(t.valid & GS_TM_MEMORY);
  CHECK_EQ(t.memory_total_bytes, 16ull << 30);
  CHECK_EQ(t.memory_free_bytes, 4ull << 30);
  CHECK_EQ(t.memory_used_bytes, 12ull << 30);
  /* No hwmon, thermal zone or powercap in this tree. */
  CHECK(!(t.valid & GS_TM_TEMPERATURE));
  CHECK(!(t.valid & GS_TM_POWER));
  remove_root();
}

static void memory_cgroup_v2_limit(void) {
  make_root();
  put("proc/self/cgroup", "0::/jobs/j1\n");
  put("sys/fs/cgroup/jobs/j1/memory.max", "2147483648\n");
  put("sys/fs/cgroup/jobs/j1/memory.current", "1073741824\n");
  put("sys/fs/cgroup/jobs/j1/memory.stat", "anon 5\ninactive_file 268435456\nactive_file 1\n");
  gs_telemetry t;
  read_tm(&t);
  CHECK_EQ(t.memory_total_bytes, 2ull << 30);
  CHECK_EQ(t.memory_used_bytes, (1ull << 30) - (256ull << 20));
  CHECK_EQ(t.memory_free_bytes, t.memory_total_bytes - t.memory_used_bytes);
  /* "max" means no limit: back to /proc/meminfo. */
  put("sys/fs/cgroup/jobs/j1/memory.max", "max\n");
  read_tm(&t);
  CHECK_EQ(t.memory_total_bytes, 16ull << 30);
  remove_root();
}

static void memory_cgroup_v1_in_container(void) {
  make_root();
  /* The host path is not mounted in the container: the namespace root is. */
  put("proc/self/cgroup", "4:memory:/process_api/abc\n0::/\n");
  put("sys/fs/cgroup/memory/memory.limit_in_bytes", "4294967296\n");
  put("sys/fs/cgroup/memory/memory.usage_in_bytes", "1073741824\n");
  put("sys/fs/cgroup/memory/memory.stat", "cache 1\ntotal_inactive_file 0\n");
  gs_telemetry t;
  read_tm(&t);
  CHECK_EQ(t.memory_total_bytes, 4ull << 30);
  CHECK_EQ(t.memory_used_bytes, 1ull << 30);
  /* A limit above the machine's memory is no limit (v1 writes 2^63 - 4096). */
  put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  read_tm(&t);
  CHECK_EQ(t.memory_total_bytes, 16ull << 30);
  remove_root();
}

static void utilization_from_deltas(void) {
  make_root();
  gs_cpu_telemetry_state st;
  open_state(&st);
  gs_telemetry t;
  CHECK_OK(gs__cpu_telemetry_read(&st, 1000, &t));
  /* No tick passed during the first sample: not available rather than 0. */
  CHECK(!(t.valid & GS_TM_UTILIZATION));
  put("proc/stat", "cpu  150 0 100 850 0 0 0 0 0 0\n"); /* +50 busy of +100 */
  CHECK_OK(gs__cpu_telemetry_read(&st, 1000, &t));
  CHECK(t.valid & GS_TM_UTILIZATION);
  CHECK(t.utilization_percent > 49.99 && t.utilization_percent < 50.01);
  put("proc/stat", "cpu  150 0 100 950 0 0 0 0 0 0\n"); /* idle */
  CHECK_OK(gs__cpu_telemetry_read(&st, 1000, &t));
  CHECK(t.valid & GS_TM_UTILIZATION);
  CHECK(t.utilization_percent < 0.01);
  gs__cpu_telemetry_destroy(&st);
  remove_root();
}

static void temperature_sources(void) {
  make_root();
  put("sys/class/hwmon/hwmon0/name", "nvme\n"); /* not a CPU sensor: ignored */
  put("sys/class/hwmon/hwmon0/temp1_input", "90000\n");
  put("sys/class/thermal/thermal_zone0/type", "x86_pkg_temp\n");
  put("sys/class/thermal/thermal_zone0/temp", "61000\n");
  gs_telemetry t;
  read_tm(&t);
  CHECK(t.valid & GS_TM_TEMPERATURE);
  CHECK(t.temperature_c > 60.99 && t.temperature_c < 61.01);
  /* A CPU hwmon chip wins over thermal zones; its hottest sensor counts. */
  put("sys/class/hwmon/hwmon1/name", "k10temp\n");
  put("sys/class/hwmon/hwmon1/temp1_input", "45500\n");
  put("sys/class/hwmon/hwmon1/temp3_input", "52250\n");
  read_tm(&t);
  CHECK(t.temperature_c > 52.24 && t.temperature_c < 52.26);
  remove_root();
}

static void power_from_rapl_with_wrap(void) {
  make_root();
  const uint64_t range = 262143328850ull;
  put("sys/class/powercap/intel-rapl:0/max_energy_range_uj", "%llu\n", (unsigned long long)range);
  put("sys/class/powercap/intel-rapl:0/energy_uj", "%llu\n", (unsigned long long)(range - 1000000));
  put("sys/class/powercap/intel-rapl:0:0/max_energy_range_uj", "%llu\n", (unsigned long long)range);
  put("sys/class/powercap/intel-rapl:0:0/energy_uj", "5\n"); /* a sub-domain: not added */
  gs_cpu_telemetry_state st;
  open_state(&st);
  gs_telemetry t;
  uint64_t a0 = gs_now_ns();
  CHECK_OK(gs__cpu_telemetry_read(&st, 1000, &t));
  uint64_t a1 = gs_now_ns();
  CHECK_EQ(st.rapl_count, 1);
  gs_sleep_ns(50 * 1000 * 1000);
  /* The counter wrapped: 1 J before the wrap and 4 J after it, 5 J in all. */
  put("sys/class/powercap/intel-rapl:0/energy_uj", "4000000\n");
  uint64_t b0 = gs_now_ns();
  CHECK_OK(gs__cpu_telemetry_read(&st, 1000, &t));
  uint64_t b1 = gs_now_ns();
  CHECK(t.valid & GS_TM_POWER);
  double lo = 5.0 / ((double)(b1 - a0) / 1e9), hi = 5.0 / ((double)(b0 - a1) / 1e9);
  CHECK_MSG(t.power_w >= lo * 0.999 && t.power_w <= hi * 1.001, "power %.3f W not in [%.3f, %.3f]",
            t.power_w, lo, hi);
  gs__cpu_telemetry_destroy(&st);
  remove_root();
}

static void model_name_and_cores(void) {
  make_root();
  put("proc/cpuinfo", "processor\t: 0\nvendor_id\t: X\nmodel name\t: Test CPU 9000\n");
  char proc[300], name[128];
  snprintf(proc, sizeof proc, "%s/proc", root);
  gs__cpu_model_name(proc, name, sizeof name);
  CHECK_STR(name, "Test CPU 9000");
  put("proc/cpuinfo", "processor\t: 0\nHardware\t: Raspberry Thing\n");
  gs__cpu_model_name(proc, name, sizeof name);
  CHECK_STR(name, "Raspberry Thing");
  CHECK(gs__cpu_core_count() >= 1);
  remove_root();
}

static const gs_test tests[] = {
    {"parse_stat", parse_stat},
    {"parse_meminfo", parse_meminfo},
    {"parse_cgroup", parse_cgroup},
    {"energy_wraparound", energy_wraparound},
    {"memory_without_limit", memory_without_limit},
    {"memory_cgroup_v2_limit", memory_cgroup_v2_limit},
    {"memory_cgroup_v1_in_container", memory_cgroup_v1_in_container},
    {"utilization_from_deltas", utilization_from_deltas},
    {"temperature_sources", temperature_sources},
    {"power_from_rapl_with_wrap", power_from_rapl_with_wrap},
    {"model_name_and_cores", model_name_and_cores},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {.name = "cpu_telemetry", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}
