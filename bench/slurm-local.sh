#!/usr/bin/env bash
# slurm-local.sh - a one-node Slurm on this machine (slurmctld + slurmd as
# root, munge for auth) so that bench/sched.py can measure it beside gpusrv.
# Installs slurm-wlm and munge if missing (root only). Idempotent.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "slurm-local: needs root" >&2; exit 1; }
if ! command -v slurmctld >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi
host=$(hostname -s)
grep -qw "$host" /etc/hosts || echo "127.0.0.1 $host" >> /etc/hosts
if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge
  [ -f /etc/munge/munge.key ] || /usr/sbin/mungekey -c
  chown munge:munge /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged
fi
mkdir -p /var/spool/slurmd /var/spool/slurmctld /var/log/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=bench
SlurmctldHost=$host
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobAcctGatherType=jobacct_gather/none
NodeName=$host CPUs=$(nproc) RealMemory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 )) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 50); do sinfo -h -o %t 2>/dev/null | grep -q idle && exit 0; sleep 0.2; done
echo "slurm-local: the node did not come up (see /var/log/slurm/)" >&2
exit 1
