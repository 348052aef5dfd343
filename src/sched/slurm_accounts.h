/* slurm_accounts.h - the Slurm account a tenant's jobs on several nodes are
 * charged to: mapped in the daemon's --slurm-accounts ("tenant=account,..."),
 * else named after the tenant. Where the daemon may create accounts
 * (--slurm-create-accounts), it makes the account and its user's
 * association with sacctmgr before the tenant's first such job, and keeps
 * the account's fair-share shares at the tenant's weight (100 shares per
 * unit of weight). Shares belong to the account: tenants mapped to one
 * account leave it the weight of the one whose job came last. */
#ifndef GS_SLURM_ACCOUNTS_H
#define GS_SLURM_ACCOUNTS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gs_slurm_accounts gs_slurm_accounts;

/* `map` is copied. `sacctmgr` (copied): the command run to create accounts
 * (a name found on PATH, or a path), or NULL where accounts are not
 * created. The caller frees the result with gs_slurm_accounts_free(). */
int gs_slurm_accounts_create(const char *map, const char *sacctmgr, gs_slurm_accounts **out);
void gs_slurm_accounts_free(gs_slurm_accounts *accounts);

/* Slurm's fair-share shares for a tenant's weight: 100 per unit, at least 1. */
int gs_slurm_shares(double weight);

/* The account for `tenant`'s jobs, run as Unix user `user`, into `out`
 * (`cap` bytes). GS_EINVAL when the name is too long or holds characters
 * sacctmgr would split on. Where accounts are created, the first call for
 * an (account, user) pair in this daemon, and every call whose weight
 * gives other shares than the last, runs sacctmgr (each run up to 20 s,
 * blocking the caller; concurrent callers wait their turn): GS_EIO, with
 * sacctmgr's own words, when it fails. */
int gs_slurm_account_for(gs_slurm_accounts *accounts, const char *tenant, const char *user,
                         double weight, char *out, size_t cap);

#endif
