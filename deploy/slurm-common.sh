# slurm-common.sh - sourced by the scripts that start a one-node Slurm on
# this machine (bench/slurm-local.sh, deploy/slurm-one-node-check.sh).

# Installs slurmd, slurmctld and munge where missing (root).
gs_slurm_install() {
  if ! command -v slurmctld >/dev/null || ! command -v srun >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      slurmd slurmctld slurm-client munge >/dev/null
  fi
}

# munged, with a key made at first use; the host's short name resolvable.
gs_slurm_start_munge() {
  local host
  host=$(hostname -s)
  grep -qw "$host" /etc/hosts || echo "127.0.0.1 $host" >> /etc/hosts
  if ! pgrep -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    [ -f /etc/munge/munge.key ] || /usr/sbin/mungekey -c
    chown munge:munge /etc/munge/munge.key
    runuser -u munge -- /usr/sbin/munged
  fi
  mkdir -p /var/spool/slurmd /var/spool/slurmctld /var/log/slurm
}

# The slurm.conf lines every such cluster shares: one controller on this
# host, slurmctld and slurmd as root, no cgroups, cons_tres by core.
gs_slurm_base_conf() {
  cat <<CONF
ClusterName=$1
SlurmctldHost=$(hostname -s)
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
CONF
}
