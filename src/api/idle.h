/* idle.h - inside the repository: what repository.c and idle.c share for
 * unloading idle models and loading them again on demand. Not for the
 * protocols, which use repository.h. */
#ifndef GS_API_IDLE_H
#define GS_API_IDLE_H

#include "api/repository.h"

/* Loads m from its directory and counts the load under `why` (the
 * repository's admin lock and m's use lock held exclusively; m's state set
 * to LOADING by the caller). repository.c */
void gs__repository_load_locked(gs_repository *repo, gs_served_model *m, gs_load_reason why);
/* Unloads m (the same locks held): queued requests finish first. */
void gs__repository_unload_locked(gs_served_model *m);

/* Starts and stops the thread that unloads idle models. idle.c */
void gs__idle_start(gs_repository *repo);
void gs__idle_stop(gs_repository *repo);

#endif
