/* cli_index.c - every subcommand of `gpusrv`, its one-line summary, and
 * which executable runs it (both executables list them all). */
#include "cli/cli.h"

const gs_cli_entry gs_cli_index[] = {
    {"serve", "Serve the model repository over HTTP (KServe v2)", true},
    {"smi", "Show devices, their memory, utilization, temperature and power", true},
    {"model", "Inspect an ONNX model, or run it once on .npy inputs", true},
    {"top", "Watch a daemon live: devices, jobs, models and the queue", false},
    {"models", "List the models of a running daemon and their states", false},
    {"infer", "Send one inference request to a running daemon", false},
    {"batch", "Run a model over a data set as an overlapped pipeline", true},
    {"bench", "Measure each stage of the data flow on this machine, then whole pipelines", true},
    {"submit", "Queue a process job (a command) with the daemon", false},
    {"images", "List the local container images your jobs may run in", false},
    {"cdi", "Write the CDI spec that gives container jobs their devices", true},
    {"slurm", "Print this node's gres.conf and NodeName lines for Slurm", true},
    {"jobs", "List jobs: pending, running, and with --all ended ones", false},
    {"job", "Show one job in detail, with its history", false},
    {"cancel", "Cancel a job", false},
    {"logs", "Print (or follow) a job's output", false},
    {"wait", "Wait for a job to end; exit with its exit code", false},
    {"usage", "Accounting per tenant: device, memory and CPU time of ended jobs", false},
    {"tenant", "Manage tenants and their tokens (admin)", false},
    {NULL, NULL, false},
};
