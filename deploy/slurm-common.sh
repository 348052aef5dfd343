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

# The slurm.conf lines that do not name a path or a host: slurmctld and
# slurmd as root, no cgroups, cons_tres by core. Shared with
# deploy/slurm-cluster.sh, which keeps its own paths.
gs_slurm_plugin_conf() {
  cat <<CONF
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
CONF
}

# The slurm.conf lines every one-node cluster shares: one controller on
# this host, the Debian default paths (/etc/slurm, /var/spool, /run).
gs_slurm_base_conf() {
  gs_slurm_plugin_conf
  cat <<CONF
ClusterName=$1
SlurmctldHost=$(hostname -s)
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
CONF
}
