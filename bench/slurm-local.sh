#!/usr/bin/env bash
# slurm-local.sh - a one-node Slurm on this machine (slurmctld + slurmd as
# root, munge for auth) so that bench/sched.py can measure it beside gpusrv.
# Installs Slurm and munge if missing (root only). Idempotent.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "slurm-local: needs root" >&2; exit 1; }
. "$(dirname "$0")/../deploy/slurm-common.sh"
gs_slurm_install
gs_slurm_start_munge
host=$(hostname -s)
{
  gs_slurm_base_conf bench
  cat <<CONF
NodeName=$host CPUs=$(nproc) RealMemory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 )) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
} > /etc/slurm/slurm.conf
: > /etc/slurm/gres.conf # no GRES: what another script left there would not match
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 50); do sinfo -h -o %t 2>/dev/null | grep -q idle && exit 0; sleep 0.2; done
echo "slurm-local: the node did not come up (see /var/log/slurm/)" >&2
exit 1
