/* ledger.c - bookings of device memory: a running sum per device under
 * one lock, refused when it would pass the device's capacity. */
#include "sched/sched.h"

#include "base/error.h"
#include "base/units.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct device_account {
  gs_device_t *device;
  uint64_t capacity, booked;
} device_account;

struct gs_ledger {
  pthread_mutex_t lock;
  int n;
  device_account *accounts;
};

struct gs_booking {
  gs_ledger *ledger;
  device_account *account;
  uint64_t bytes;
  char owner[128];
};

int gs_ledger_create(gs_ledger **out) {
  gs_ledger *l = calloc(1, sizeof *l);
  int n = gs_hal_device_count();
  if (l)
    l->accounts = calloc((size_t)n + 1, sizeof *l->accounts);
  if (!l || !l->accounts) {
    free(l);
    return gs_error(GS_ENOMEM, "out of memory creating the booking ledger");
  }
  pthread_mutex_init(&l->lock, NULL);
  l->n = n;
  for (int i = 0; i < n; i++) {
    l->accounts[i].device = gs_hal_device(i);
    l->accounts[i].capacity = gs_device_get_info(gs_hal_device(i))->memory_total_bytes;
  }
  *out = l;
  return GS_OK;
}

void gs_ledger_free(gs_ledger *l) {
  if (!l)
    return;
  pthread_mutex_destroy(&l->lock);
  free(l->accounts);
  free(l);
}

static device_account *account_of(gs_ledger *l, gs_device_t *device) {
  for (int i = 0; i < l->n; i++)
    if (l->accounts[i].device == device)
      return &l->accounts[i];
  return NULL;
}

int gs_book_memory(gs_ledger *l, gs_device_t *device, uint64_t bytes, const char *owner,
                   gs_booking **out) {
  device_account *a = account_of(l, device);
  if (!a)
    return gs_error(GS_EINVAL, "booking on a device the ledger does not know");
  gs_booking *b = calloc(1, sizeof *b);
  if (!b)
    return gs_error(GS_ENOMEM, "out of memory for a booking");
  pthread_mutex_lock(&l->lock);
  if (bytes > a->capacity - a->booked) {
    uint64_t free_bytes = a->capacity - a->booked, cap = a->capacity;
    pthread_mutex_unlock(&l->lock);
    free(b);
    char want[32], fr[32], all[32];
    gs_format_bytes(bytes, want, sizeof want);
    gs_format_bytes(free_bytes, fr, sizeof fr);
    gs_format_bytes(cap, all, sizeof all);
    return gs_error(GS_ENOMEM, "%s: %s asked for %s of memory; %s of %s is free",
                    gs_device_get_info(device)->id, owner, want, fr, all);
  }
  a->booked += bytes;
  pthread_mutex_unlock(&l->lock);
  b->ledger = l;
  b->account = a;
  b->bytes = bytes;
  snprintf(b->owner, sizeof b->owner, "%s", owner);
  *out = b;
  return GS_OK;
}

void gs_booking_release(gs_booking *b) {
  if (!b)
    return;
  pthread_mutex_lock(&b->ledger->lock);
  b->account->booked -= b->bytes;
  pthread_mutex_unlock(&b->ledger->lock);
  free(b);
}

uint64_t gs_ledger_booked(gs_ledger *l, gs_device_t *device) {
  device_account *a = account_of(l, device);
  pthread_mutex_lock(&l->lock);
  uint64_t v = a ? a->booked : 0;
  pthread_mutex_unlock(&l->lock);
  return v;
}

uint64_t gs_ledger_capacity(gs_ledger *l, gs_device_t *device) {
  device_account *a = account_of(l, device);
  pthread_mutex_lock(&l->lock);
  uint64_t v = a ? a->capacity : 0;
  pthread_mutex_unlock(&l->lock);
  return v;
}

void gs_ledger_set_capacity(gs_ledger *l, gs_device_t *device, uint64_t bytes) {
  device_account *a = account_of(l, device);
  pthread_mutex_lock(&l->lock);
  if (a)
    a->capacity = bytes < a->booked ? a->booked : bytes;
  pthread_mutex_unlock(&l->lock);
}
