/* test_ledger.c - bookings of device memory: they add up, a booking that
 * does not fit is refused saying what is free, releases give it back (and
 * are told to a listener), and bookings from many threads at once sum exactly. */
#include "harness.h"

#include "base/error.h"
#include "hal/hal.h"
#include "sched/sched.h"

#include <pthread.h>
#include <string.h>

static gs_ledger *open_ledger(gs_device_t **cpu) {
  CHECK_OK(gs_hal_init());
  *cpu = gs_hal_device_find("cpu0");
  CHECK(*cpu != NULL);
  gs_ledger *l = NULL;
  CHECK_OK(gs_ledger_create(&l));
  return l;
}

static void bookings_add_up_and_release(void) {
  gs_device_t *cpu;
  gs_ledger *l = open_ledger(&cpu);
  CHECK_EQ(gs_ledger_capacity(l, cpu), gs_device_get_info(cpu)->memory_total_bytes);
  gs_ledger_set_capacity(l, cpu, 1000);
  gs_booking *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(gs_book_memory(l, cpu, 600, "job a", &a));
  CHECK_OK(gs_book_memory(l, cpu, 400, "job b", &b));
  CHECK_EQ(gs_ledger_booked(l, cpu), 1000);
  CHECK_ERR(gs_book_memory(l, cpu, 1, "job c", &c), GS_ENOMEM);
  CHECK(c == NULL);
  CHECK_MSG(strstr(gs_error_detail(), "cpu0") && strstr(gs_error_detail(), "job c") &&
                strstr(gs_error_detail(), "0 B of 1000 B is free") &&
                strstr(gs_error_detail(), "most is held by job a"),
            "message: %s", gs_error_detail());
  gs_booking_release(a);
  CHECK_EQ(gs_ledger_booked(l, cpu), 400);
  /* A booking grows in one step, or not at all. */
  CHECK_OK(gs_booking_grow(b, 100));
  CHECK_EQ(gs_ledger_booked(l, cpu), 500);
  CHECK_ERR(gs_booking_grow(b, 501), GS_ENOMEM);
  CHECK_MSG(strstr(gs_error_detail(), "job b") != NULL, "%s", gs_error_detail());
  CHECK_EQ(gs_ledger_booked(l, cpu), 500);
  gs_booking_release(b);
  CHECK_EQ(gs_ledger_booked(l, cpu), 0);
  CHECK_OK(gs_book_memory(l, cpu, 400, "job b", &b));
  CHECK_OK(gs_book_memory(l, cpu, 600, "job c", &c));
  /* Capacity never drops below what is booked. */
  gs_ledger_set_capacity(l, cpu, 10);
  CHECK_EQ(gs_ledger_capacity(l, cpu), 1000);
  gs_booking_release(b);
  gs_booking_release(c);
  gs_booking_release(NULL);
  CHECK_EQ(gs_ledger_booked(l, cpu), 0);
  gs_ledger_free(l);
  gs_hal_shutdown();
}

static void count_release(void *arg) { ++*(int *)arg; }

/* The front desk's listener: told of every release, and of none once removed. */
static void releases_are_told(void) {
  gs_device_t *cpu;
  gs_ledger *l = open_ledger(&cpu);
  int told = 0;
  gs_ledger_on_release(l, count_release, &told);
  gs_booking *a = NULL, *b = NULL;
  CHECK_OK(gs_book_memory(l, cpu, 100, "model m instance 1", &a));
  CHECK_OK(gs_book_memory(l, cpu, 100, "job 1", &b));
  CHECK_OK(gs_booking_grow(b, 10));
  CHECK_EQ(told, 0); /* booking and growing free nothing */
  gs_booking_release(a);
  CHECK_EQ(told, 1);
  gs_booking_release(NULL);
  CHECK_EQ(told, 1);
  gs_ledger_on_release(l, NULL, NULL);
  gs_booking_release(b);
  CHECK_EQ(told, 1);
  gs_ledger_free(l);
  gs_hal_shutdown();
}

typedef struct {
  gs_ledger *l;
  gs_device_t *cpu;
  int granted;
  gs_booking *held[200];
} worker_arg;

static void *book_many(void *p) {
  worker_arg *w = p;
  for (int i = 0; i < 200; i++)
    if (gs_book_memory(w->l, w->cpu, 10, "worker", &w->held[w->granted]) == 0)
      w->granted++;
  return NULL;
}

static void concurrent_bookings_never_overbook(void) {
  gs_device_t *cpu;
  gs_ledger *l = open_ledger(&cpu);
  gs_ledger_set_capacity(l, cpu, 10 * 500); /* room for 500 of the 800 asked */
  static worker_arg w[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker_arg){.l = l, .cpu = cpu};
    CHECK_EQ(pthread_create(&t[i], NULL, book_many, &w[i]), 0);
  }
  int granted = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    granted += w[i].granted;
  }
  CHECK_EQ(granted, 500);
  CHECK_EQ(gs_ledger_booked(l, cpu), 5000);
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < w[i].granted; k++)
      gs_booking_release(w[i].held[k]);
  CHECK_EQ(gs_ledger_booked(l, cpu), 0);
  gs_ledger_free(l);
  gs_hal_shutdown();
}

static void unknown_device_is_refused(void) {
  gs_device_t *cpu;
  gs_ledger *l = open_ledger(&cpu);
  gs_booking *b = NULL;
  CHECK_ERR(gs_book_memory(l, (gs_device_t *)&b, 1, "x", &b), GS_EINVAL);
  gs_ledger_free(l);
  gs_hal_shutdown();
}

/* Gangs over two devices (cpu0 and the testcpu plugin's device) booked from
 * several threads beside single bookings: a gang is all or nothing, so the
 * sums per device are exactly what the granted bookings add up to. */
typedef struct {
  gs_ledger *l;
  gs_device_t *dev[2];
  int gangs, singles;
  gs_booking *held[400];
  int n_held;
} gang_arg;

static void *book_gangs(void *p) {
  gang_arg *w = p;
  for (int i = 0; i < 100; i++) {
    gs_booking_part gang[2] = {{.device = w->dev[0], .bytes = 1, .share = 7},
                               {.device = w->dev[1], .bytes = 1, .share = 7}};
    if (gs_book(w->l, gang, 2, "gang", &w->held[w->n_held]) == 0) {
      w->n_held++;
      w->gangs++;
    }
    gs_booking_part single = {.device = w->dev[1], .share = 5};
    if (gs_book(w->l, &single, 1, "single", &w->held[w->n_held]) == 0) {
      w->n_held++;
      w->singles++;
    }
  }
  return NULL;
}

static void gang_bookings_are_atomic(void) {
  CHECK_OK(gs_hal_init());
  gs_device_t *cpu = gs_hal_device_find("cpu0"), *other = gs_hal_device_find("testcpu0");
  if (!other) {
    printf("skip: no testcpu0 device (GPUSRV_PLUGIN_PATH names the test plugins)\n");
    gs_hal_shutdown();
    return;
  }
  gs_ledger *l = NULL;
  CHECK_OK(gs_ledger_create(&l));
  static gang_arg w[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (gang_arg){.l = l, .dev = {cpu, other}};
    CHECK_EQ(pthread_create(&t[i], NULL, book_gangs, &w[i]), 0);
  }
  int gangs = 0, singles = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    gangs += w[i].gangs;
    singles += w[i].singles;
  }
  CHECK(gangs > 0 && singles > 0);
  CHECK_EQ(gs_ledger_share_booked(l, cpu), 7 * gangs);
  CHECK_EQ(gs_ledger_share_booked(l, other), 7 * gangs + 5 * singles);
  CHECK(gs_ledger_share_booked(l, other) <= 100 && gs_ledger_share_booked(l, other) > 100 - 7);
  CHECK_EQ(gs_ledger_booked(l, cpu), gangs);
  /* A gang that does not fit says which device and what is free. */
  gs_booking *b = NULL;
  gs_booking_part gang[2] = {{.device = cpu, .share = 1}, {.device = other, .share = 50}};
  CHECK_ERR(gs_book(l, gang, 2, "big gang", &b), GS_ENOMEM);
  CHECK_MSG(strstr(gs_error_detail(), "testcpu0") && strstr(gs_error_detail(), "50%"),
            "message: %s", gs_error_detail());
  CHECK_EQ(gs_ledger_share_booked(l, cpu), 7 * gangs);
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < w[i].n_held; k++)
      gs_booking_release(w[i].held[k]);
  CHECK_EQ(gs_ledger_share_booked(l, cpu), 0);
  CHECK_EQ(gs_ledger_share_booked(l, other), 0);
  gs_ledger_free(l);
  gs_hal_shutdown();
}

/* Who holds a device whole: the largest compute share, named in refusals
 * and asked for by a model's instances before they take the device. */
static void whole_devices_name_their_holder(void) {
  gs_device_t *cpu;
  gs_ledger *l = open_ledger(&cpu);
  char owner[64] = "";
  CHECK(!gs_ledger_held_whole(l, cpu, owner, sizeof owner));
  gs_booking *small = NULL, *big = NULL, *c = NULL;
  gs_booking_part part = {.device = cpu, .bytes = 10, .share = 30};
  CHECK_OK(gs_book(l, &part, 1, "job small", &small));
  CHECK(!gs_ledger_held_whole(l, cpu, owner, sizeof owner));
  part.share = 70;
  CHECK_OK(gs_book(l, &part, 1, "slurm job 7 (alice)", &big));
  CHECK(gs_ledger_held_whole(l, cpu, owner, sizeof owner));
  CHECK_MSG(!strcmp(owner, "slurm job 7 (alice)"), "holder: %s", owner);
  part.share = 1;
  CHECK_ERR(gs_book(l, &part, 1, "model m instance 0", &c), GS_ENOMEM);
  CHECK_MSG(strstr(gs_error_detail(), "most is held by slurm job 7 (alice)") != NULL,
            "message: %s", gs_error_detail());
  gs_booking_release(big);
  CHECK(!gs_ledger_held_whole(l, cpu, owner, sizeof owner));
  gs_booking_release(small);
  gs_ledger_free(l);
  gs_hal_shutdown();
}

/* What is left of a device, taken whole under the lock: all its free
 * memory and compute, whatever was booked before. */
static void the_rest_of_a_device_is_booked_at_once(void) {
  gs_device_t *cpu;
  gs_ledger *l = open_ledger(&cpu);
  gs_ledger_set_capacity(l, cpu, 1000);
  gs_booking *some = NULL, *rest = NULL, *more = NULL;
  gs_booking_part part = {.device = cpu, .bytes = 300, .share = 40};
  CHECK_OK(gs_book(l, &part, 1, "job some", &some));
  CHECK_OK(gs_book_rest(l, &cpu, 1, "slurm job 9 (bob)", &rest));
  CHECK_EQ(gs_ledger_booked(l, cpu), 1000);
  CHECK_EQ(gs_ledger_share_booked(l, cpu), 100);
  CHECK_ERR(gs_book_memory(l, cpu, 1, "model m", &more), GS_ENOMEM);
  gs_booking_release(some);
  CHECK_EQ(gs_ledger_booked(l, cpu), 700); /* the rest keeps what it took */
  gs_booking_release(rest);
  CHECK_EQ(gs_ledger_booked(l, cpu), 0);
  CHECK_EQ(gs_ledger_share_booked(l, cpu), 0);
  gs_device_t *too_many[GS_BOOKING_MAX_PARTS + 1] = {0};
  CHECK_ERR(gs_book_rest(l, too_many, GS_BOOKING_MAX_PARTS + 1, "x", &more), GS_EINVAL);
  gs_ledger_free(l);
  gs_hal_shutdown();
}

static const gs_test tests[] = {
    {"the_rest_of_a_device_is_booked_at_once", the_rest_of_a_device_is_booked_at_once},
    {"whole_devices_name_their_holder", whole_devices_name_their_holder},
    {"gang_bookings_are_atomic", gang_bookings_are_atomic},
    {"bookings_add_up_and_release", bookings_add_up_and_release},
    {"releases_are_told", releases_are_told},
    {"concurrent_bookings_never_overbook", concurrent_bookings_never_overbook},
    {"unknown_device_is_refused", unknown_device_is_refused},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {.name = "ledger", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}
