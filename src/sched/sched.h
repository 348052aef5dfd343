/* sched.h - the front desk, as far as it exists yet: a ledger of bookings
 * of device memory. Every use of a device books what it needs; a booking
 * that does not fit is refused with which device and what is free. (The
 * tenants, quotas, queue and process jobs of DESIGN.md come with the
 * scheduler issue.) */
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

/* Memory of `device` booked so far, and in all. */
uint64_t gs_ledger_booked(gs_ledger *ledger, gs_device_t *device);
uint64_t gs_ledger_capacity(gs_ledger *ledger, gs_device_t *device);
/* Sets what the ledger hands out of `device` (default: its memory_total_bytes). */
void gs_ledger_set_capacity(gs_ledger *ledger, gs_device_t *device, uint64_t bytes);

#endif
