/* sched.h - the front desk: a ledger of bookings of device memory and
 * compute share (every use of a device books what it needs; a booking that
 * does not fit is refused with which device and what is free), and the
 * tenants, queue and process jobs built on it (frontdesk.h). */
#ifndef GS_SCHED_H
#define GS_SCHED_H

#include "hal/hal.h"

typedef struct gs_ledger gs_ledger;
typedef struct gs_booking gs_booking;

/* A ledger over every device of the HAL, each with its memory_total_bytes
 * to hand out. The caller frees it with gs_ledger_free() after releasing
 * every booking. */
int gs_ledger_create(gs_ledger **out);
void gs_ledger_free(gs_ledger *ledger);

/* Books `bytes` of device memory for `owner` (copied, for listings and
 * messages). GS_ENOMEM when it does not fit, saying the device, the size
 * asked for and what is free. The caller releases it. */
int gs_book_memory(gs_ledger *ledger, gs_device_t *device, uint64_t bytes, const char *owner,
                   gs_booking **out);
void gs_booking_release(gs_booking *booking);

/* One device's part of a booking: memory and a percentage of its compute. */
typedef struct gs_booking_part {
  gs_device_t *device;
  uint64_t bytes;
  int share;
} gs_booking_part;

#define GS_BOOKING_MAX_PARTS 64

/* Books every part or none (a gang of devices): GS_ENOMEM naming the first
 * device that lacks memory or compute, and what it has free. */
int gs_book(gs_ledger *ledger, const gs_booking_part *parts, int n_parts, const char *owner,
            gs_booking **out);

/* Compute share of `device` booked so far, in percent (0..100). */
int gs_ledger_share_booked(gs_ledger *ledger, gs_device_t *device);

/* Calls `fn` for every booking held, under the ledger's lock (fn must not
 * book or release). */
void gs_ledger_each(gs_ledger *ledger,
                    void (*fn)(const char *owner, const gs_booking_part *parts, int n_parts,
                               void *ctx),
                    void *ctx);

/* Memory of `device` booked so far, and in all. */
uint64_t gs_ledger_booked(gs_ledger *ledger, gs_device_t *device);
uint64_t gs_ledger_capacity(gs_ledger *ledger, gs_device_t *device);
/* Sets what the ledger hands out of `device` (default: its memory_total_bytes). */
void gs_ledger_set_capacity(gs_ledger *ledger, gs_device_t *device, uint64_t bytes);

#endif
