/* ledger.c - bookings of device memory and compute share: running sums per
 * device under one lock, a booking of several devices taken all at once or
 * not at all, refused when it would pass a device's capacity. */
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
  int share_booked;
} device_account;

struct gs_booking {
  gs_ledger *ledger;
  gs_booking *prev, *next; /* the ledger's list of bookings held */
  int n_parts;
  gs_booking_part parts[GS_BOOKING_MAX_PARTS];
  device_account *accounts[GS_BOOKING_MAX_PARTS];
  char owner[GS_LEDGER_OWNER_MAX];
};

struct gs_ledger {
  pthread_mutex_t lock;
  int n;
  device_account *accounts;
  gs_booking *held;
  void (*on_release)(void *arg);
  void *on_release_arg;
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

/* The booking holding most of `device` (compute share first, then memory),
 * or NULL when nothing is booked there. With the lock held. */
static const gs_booking *largest_holder(const gs_ledger *l, const gs_device_t *device) {
  const gs_booking *best = NULL;
  int best_share = -1;
  uint64_t best_bytes = 0;
  for (const gs_booking *b = l->held; b; b = b->next)
    for (int i = 0; i < b->n_parts; i++) {
      const gs_booking_part *p = &b->parts[i];
      if (p->device == device && (p->share > best_share ||
                                  (p->share == best_share && p->bytes > best_bytes))) {
        best = b;
        best_share = p->share;
        best_bytes = p->bytes;
      }
    }
  return best;
}

/* Called with the lock held: why part `p` does not fit, naming the largest
 * holder of the device, or GS_OK. */
static int check_fits(const gs_ledger *l, const device_account *a, const gs_booking_part *p,
                      const char *owner) {
  bool no_memory = p->bytes > a->capacity - a->booked;
  if (!no_memory && p->share <= 100 - a->share_booked)
    return GS_OK;
  const gs_booking *holder = largest_holder(l, p->device);
  const char *id = gs_device_get_info(p->device)->id;
  char held_by[240] = "";
  if (holder)
    snprintf(held_by, sizeof held_by, " (most is held by %s)", holder->owner);
  if (no_memory) {
    char want[32], fr[32], all[32];
    gs_format_bytes(p->bytes, want, sizeof want);
    gs_format_bytes(a->capacity - a->booked, fr, sizeof fr);
    gs_format_bytes(a->capacity, all, sizeof all);
    return gs_error(GS_ENOMEM, "%s: %s asked for %s of memory; %s of %s is free%s", id, owner,
                    want, fr, all, held_by);
  }
  return gs_error(GS_ENOMEM, "%s: %s asked for %d%% of its compute; %d%% is free%s", id, owner,
                  p->share, 100 - a->share_booked, held_by);
}

/* gs_book, or (rest) gs_book_rest: the parts' sizes then set under the lock. */
static int book(gs_ledger *l, const gs_booking_part *parts, int n_parts, const char *owner,
                bool rest, gs_booking **out) {
  if (n_parts < 0 || n_parts > GS_BOOKING_MAX_PARTS)
    return gs_error(GS_EINVAL, "a booking has 0 to %d devices, not %d", GS_BOOKING_MAX_PARTS,
                    n_parts);
  gs_booking *b = calloc(1, sizeof *b);
  if (!b)
    return gs_error(GS_ENOMEM, "out of memory for a booking");
  for (int i = 0; i < n_parts; i++) {
    b->accounts[i] = account_of(l, parts[i].device);
    if (!b->accounts[i]) {
      free(b);
      return gs_error(GS_EINVAL, "booking on a device the ledger does not know");
    }
    if (parts[i].share < 0 || parts[i].share > 100) {
      free(b);
      return gs_error(GS_EINVAL, "a compute share is 0 to 100%%, not %d%%", parts[i].share);
    }
    for (int k = 0; k < i; k++)
      if (b->accounts[k] == b->accounts[i]) {
        free(b);
        return gs_error(GS_EINVAL, "a booking names device %s twice",
                        gs_device_get_info(parts[i].device)->id);
      }
    b->parts[i] = parts[i];
  }
  b->n_parts = n_parts;
  b->ledger = l;
  snprintf(b->owner, sizeof b->owner, "%s", owner);
  pthread_mutex_lock(&l->lock);
  for (int i = 0; i < n_parts && rest; i++) { /* what is left, now that nothing can change it */
    b->parts[i].bytes = b->accounts[i]->capacity - b->accounts[i]->booked;
    b->parts[i].share = 100 - b->accounts[i]->share_booked;
  }
  for (int i = 0; i < n_parts; i++) {
    int rc = check_fits(l, b->accounts[i], &b->parts[i], owner);
    if (rc < 0) {
      pthread_mutex_unlock(&l->lock);
      free(b);
      return rc;
    }
  }
  for (int i = 0; i < n_parts; i++) {
    b->accounts[i]->booked += b->parts[i].bytes;
    b->accounts[i]->share_booked += b->parts[i].share;
  }
  b->next = l->held;
  if (l->held)
    l->held->prev = b;
  l->held = b;
  pthread_mutex_unlock(&l->lock);
  *out = b;
  return GS_OK;
}

int gs_book(gs_ledger *l, const gs_booking_part *parts, int n_parts, const char *owner,
            gs_booking **out) {
  return book(l, parts, n_parts, owner, false, out);
}

int gs_book_rest(gs_ledger *l, gs_device_t *const *devices, int n, const char *owner,
                 gs_booking **out) {
  gs_booking_part parts[GS_BOOKING_MAX_PARTS];
  if (n < 0 || n > GS_BOOKING_MAX_PARTS)
    return gs_error(GS_EINVAL, "a booking has 0 to %d devices, not %d", GS_BOOKING_MAX_PARTS, n);
  for (int i = 0; i < n; i++)
    parts[i] = (gs_booking_part){.device = devices[i]};
  return book(l, parts, n, owner, true, out);
}

int gs_book_memory(gs_ledger *l, gs_device_t *device, uint64_t bytes, const char *owner,
                   gs_booking **out) {
  gs_booking_part part = {.device = device, .bytes = bytes};
  return gs_book(l, &part, 1, owner, out);
}

int gs_booking_grow(gs_booking *b, uint64_t bytes) {
  if (b->n_parts < 1)
    return gs_error(GS_EINVAL, "a booking of no device cannot grow");
  gs_ledger *l = b->ledger;
  gs_booking_part more = {.device = b->parts[0].device, .bytes = bytes};
  pthread_mutex_lock(&l->lock);
  int rc = check_fits(l, b->accounts[0], &more, b->owner);
  if (rc == 0) {
    b->parts[0].bytes += bytes;
    b->accounts[0]->booked += bytes;
  }
  pthread_mutex_unlock(&l->lock);
  return rc;
}

void gs_booking_release(gs_booking *b) {
  if (!b)
    return;
  gs_ledger *l = b->ledger;
  pthread_mutex_lock(&l->lock);
  for (int i = 0; i < b->n_parts; i++) {
    b->accounts[i]->booked -= b->parts[i].bytes;
    b->accounts[i]->share_booked -= b->parts[i].share;
  }
  if (b->prev)
    b->prev->next = b->next;
  else
    l->held = b->next;
  if (b->next)
    b->next->prev = b->prev;
  if (l->on_release)
    l->on_release(l->on_release_arg);
  pthread_mutex_unlock(&l->lock);
  free(b);
}

void gs_ledger_on_release(gs_ledger *l, void (*fn)(void *arg), void *arg) {
  pthread_mutex_lock(&l->lock);
  l->on_release = fn;
  l->on_release_arg = arg;
  pthread_mutex_unlock(&l->lock);
}

void gs_ledger_each(gs_ledger *l,
                    void (*fn)(const char *owner, const gs_booking_part *parts, int n_parts,
                               void *ctx),
                    void *ctx) {
  pthread_mutex_lock(&l->lock);
  for (gs_booking *b = l->held; b; b = b->next)
    fn(b->owner, b->parts, b->n_parts, ctx);
  pthread_mutex_unlock(&l->lock);
}

uint64_t gs_ledger_booked(gs_ledger *l, gs_device_t *device) {
  device_account *a = account_of(l, device);
  pthread_mutex_lock(&l->lock);
  uint64_t v = a ? a->booked : 0;
  pthread_mutex_unlock(&l->lock);
  return v;
}

int gs_ledger_share_booked(gs_ledger *l, gs_device_t *device) {
  device_account *a = account_of(l, device);
  pthread_mutex_lock(&l->lock);
  int v = a ? a->share_booked : 0;
  pthread_mutex_unlock(&l->lock);
  return v;
}

bool gs_ledger_held_whole(gs_ledger *l, gs_device_t *device, char *owner, size_t size) {
  device_account *a = account_of(l, device);
  pthread_mutex_lock(&l->lock);
  const gs_booking *holder = a && a->share_booked >= 100 ? largest_holder(l, device) : NULL;
  if (holder)
    snprintf(owner, size, "%s", holder->owner);
  pthread_mutex_unlock(&l->lock);
  return holder != NULL;
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
