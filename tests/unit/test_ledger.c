/* test_ledger.c - bookings of device memory: they add up, a booking that
 * does not fit is refused saying what is free, releases give it back, and
 * bookings from many threads at once sum exactly. */
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
                strstr(gs_error_detail(), "0 B of 1000 B is free"),
            "message: %s", gs_error_detail());
  gs_booking_release(a);
  CHECK_EQ(gs_ledger_booked(l, cpu), 400);
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

static const gs_test tests[] = {
    {"bookings_add_up_and_release", bookings_add_up_and_release},
    {"concurrent_bookings_never_overbook", concurrent_bookings_never_overbook},
    {"unknown_device_is_refused", unknown_device_is_refused},
    {NULL, NULL},
};

int main(int argc, char **argv) {
  gs_test_suite suite = {.name = "ledger", .tests = tests};
  return gs_test_run(&suite, argc, argv);
}
