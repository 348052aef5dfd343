/* cli_engine.c - the subcommands gpusrv-engine runs: those that need the
 * engine or the HAL (`gpusrv` execs it for them). */
#include "cli/cli.h"

const bool gs_cli_is_engine = true;

const gs_cli_command *const gs_cli_commands[] = {&gs_cli_serve, &gs_cli_smi, &gs_cli_model,
                                                 &gs_cli_batch, &gs_cli_bench, &gs_cli_cdi,
                                                 &gs_cli_slurm,
                                                 NULL};
