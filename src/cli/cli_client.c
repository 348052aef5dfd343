/* cli_client.c - the subcommands `gpusrv` runs itself: those that only
 * talk to a daemon, through the client library. */
#include "cli/cli.h"

const bool gs_cli_is_engine = false;

const gs_cli_command *const gs_cli_commands[] = {
    &gs_cli_models, &gs_cli_infer, &gs_cli_submit, &gs_cli_jobs,   &gs_cli_job,
    &gs_cli_cancel, &gs_cli_logs,  &gs_cli_wait,   &gs_cli_usage, &gs_cli_tenant,
    &gs_cli_top,    &gs_cli_images, NULL};
