/* slurm_gpus.h - this node's GPUs as Slurm numbers them: which devices
 * are Slurm GPUs (a device node for gres.conf's File), in which order (by
 * that node, as Slurm sorts by File), shared by `gpusrv slurm gres` and the
 * prolog's bookings so that SLURM_JOB_GPUS means the same devices. */
#ifndef GS_SCHED_SLURM_GPUS_H
#define GS_SCHED_SLURM_GPUS_H

#include "hal/hal.h"

#include <stdbool.h>

/* Whether a device is an OpenCL device that is a CUDA GPU seen again
 * through NVIDIA's OpenCL driver (same name): Slurm must not get one card
 * twice. */
bool gs_slurm_seen_twice(const gs_device_info *info);

/* This node's GPUs in the order Slurm numbers them (SLURM_JOB_GPUS), the
 * order `gpusrv slurm gres` writes them: the HAL's devices of GPU type that
 * have a device node (slurmd drops a GPU without File), sorted by that node
 * as Slurm sorts by File, an OpenCL device that is a CUDA GPU seen again
 * left out. Fills out[max] with the HAL's own pointers; returns how many
 * there are. */
int gs_slurm_gpus(gs_device_t **out, int max);

#endif
