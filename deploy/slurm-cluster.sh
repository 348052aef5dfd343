#!/usr/bin/env bash
# slurm-cluster.sh start|stop|restart|status|exec NODE CMD... - a three-node
# Slurm 22.05 test cluster on this one machine (root only):
#   - slurmctld on the host, at 10.77.0.1 on the bridge gsbr0;
#   - nodes gsn1..gsn3, each a network namespace (a veth onto gsbr0,
#     10.77.0.11..13) plus a UTS namespace (so `hostname` there is gsn1..3),
#     each running its own slurmd;
#   - slurmrestd (JWT auth, openapi/v0.0.38) as the unprivileged user gsrest
#     on 127.0.0.1:6820;
#   - accounting: slurmdbd on 127.0.0.1:6918 over a MariaDB of its own
#     (mariadbd on 127.0.0.1:6919, its data under the spool, fresh at each
#     start), with associations enforced (a job needs an account its user
#     belongs to) and fair-share priorities (priority/multifactor).
# Everything lives apart from the one-node scripts' /etc/slurm/slurm.conf
# (bench/slurm-local.sh, deploy/slurm-one-node-check.sh): its own slurm.conf
# under /etc/gs-cluster, state/spool under /var/spool/gs-cluster, logs under
# /var/log/gs-cluster, pid files under /run/gs-cluster, and slurmctld on port
# 6917 rather than 6817. Clients need SLURM_CONF=/etc/gs-cluster/slurm.conf
# (`status` prints it). Note the one-node scripts `pkill -x slurmctld`, which
# also stops this cluster's controller: run one or the other.
# Settings from the environment at start: GS_CLUSTER_GPUS (fake GPUs per
# node, default 0), GS_CLUSTER_SLURMD_TIMEOUT (10), GS_CLUSTER_CRED_EXPIRE (30).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm-common.sh"

CLUSTER=gscluster
NODES="gsn1 gsn2 gsn3"          # NodeName, netns name and hostname alike
BRIDGE=gsbr0
NET=10.77.0                      # host .1, node i at .1i
CONF_DIR=/etc/gs-cluster
CONF=$CONF_DIR/slurm.conf
JWT_KEY=$CONF_DIR/jwt_hs256.key
SPOOL=/var/spool/gs-cluster
LOGS=/var/log/gs-cluster
RUN=/run/gs-cluster
CTLD_PORT=6917                   # 6817 stays free for the one-node Slurm
DBD_PORT=6918
DB_PORT=6919
DB_DIR=$SPOOL/db
REST_USER=gsrest
REST_ADDR=127.0.0.1:6820
# Seconds before slurmctld marks a silent slurmd DOWN (its jobs: NODE_FAIL,
# or requeued). Measured here: a killed node is "not responding" after
# ~13 s and DOWN after ~25-29 s, the same with 5 or 10.
SLURMD_TIMEOUT=${GS_CLUSTER_SLURMD_TIMEOUT:-10}
# A requeued batch job may start again only after the step credential
# lifetime (cred_expire, Slurm's default 120 s); shorter here for tests.
CRED_EXPIRE=${GS_CLUSTER_CRED_EXPIRE:-30}
# Fake GPUs per node (0: no GRES at all): Name=gpu Type=h200, each a
# character device made with mknod (slurmd waits ~20 s for a missing File,
# then exits). slurmrestd parses gpus_per_node/gres against its own
# GresTypes, so it must be set for REST submits with GPUs too.
GPUS=${GS_CLUSTER_GPUS:-0}
# Or the nodes as `gpusrv slurm node` and `gpusrv slurm gres` write them
# (with NodeAddr added): a file of GresTypes and NodeName lines, and a
# gres.conf. Either replaces the lines above.
NODE_LINES=${GS_CLUSTER_NODE_LINES:-}
GRES_CONF=${GS_CLUSTER_GRES_CONF:-}
# slurmd's Prolog and Epilog (PrologFlags=Alloc: at allocation), if set.
PROLOG=${GS_CLUSTER_PROLOG:-}
EPILOG=${GS_CLUSTER_EPILOG:-}
HOSTS_TAG="# gs-cluster"         # marks our /etc/hosts lines
export SLURM_CONF=$CONF

die() { echo "slurm-cluster: $*" >&2; exit 1; }
node_ip() { echo "$NET.1${1#gsn}"; }

# Is the process in pid file $1 alive? (pid files outlive their daemons.)
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# ---------------------------------------------------------------- network

# The bridge on the host and, per node, a netns with a veth pair: the host
# end (gsv-gsnX) on the bridge, the other end renamed eth0 inside.
net_up() {
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local n
  for n in $NODES; do
    ip netns add "$n"
    ip link add "gsv-$n" type veth peer name "gsp-$n"
    ip link set "gsv-$n" master "$BRIDGE" up
    ip link set "gsp-$n" netns "$n"
    ip -n "$n" link set "gsp-$n" name eth0
    ip -n "$n" addr add "$(node_ip "$n")/24" dev eth0
    ip -n "$n" link set eth0 up
    ip -n "$n" link set lo up
    # A persistent UTS namespace (bind-mounted on a file), so that slurmd
    # and `exec` share the node's hostname.
    mkdir -p "$RUN/uts"
    touch "$RUN/uts/$n"
    unshare --uts="$RUN/uts/$n" hostname "$n"
  done
}

# Removing a netns removes the veth inside it, and with it its host end.
net_down() {
  local n
  for n in $NODES; do
    if mountpoint -q "$RUN/uts/$n" 2>/dev/null; then umount "$RUN/uts/$n"; fi
    rm -f "$RUN/uts/$n"
    if ip netns list | grep -qw "^$n"; then ip netns del "$n"; fi
    if ip link show "gsv-$n" >/dev/null 2>&1; then ip link del "gsv-$n"; fi
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
}

# Run a command on a node: its network and its hostname.
in_node() {
  local n=$1; shift
  nsenter --net="/run/netns/$n" --uts="$RUN/uts/$n" "$@"
}

# /etc/hosts: the node names to their bridge addresses. Written in place
# (cat >), not by rename, since /etc/hosts may be a bind mount; the
# "127.0.0.1 <host>" line of gs_slurm_start_munge is left alone.
hosts_add() {
  hosts_remove
  local n
  for n in $NODES; do echo "$(node_ip "$n") $n $HOSTS_TAG"; done >> /etc/hosts
}
hosts_remove() {
  local t
  t=$(grep -v " $HOSTS_TAG\$" /etc/hosts || true)
  printf '%s\n' "$t" > /etc/hosts
}

# ---------------------------------------------------------------- config

write_conf() {
  mkdir -p "$CONF_DIR" "$SPOOL/ctld" "$LOGS" "$RUN"
  local n
  for n in $NODES; do mkdir -p "$SPOOL/$n/tmp"; done
  # The HS256 key slurmctld signs and checks JWTs with; kept across
  # restarts so that tokens already handed out stay good.
  if [ ! -s "$JWT_KEY" ]; then
    (umask 077; head -c 32 /dev/urandom > "$JWT_KEY")
  fi
  chown root:root "$JWT_KEY"; chmod 0600 "$JWT_KEY"
  # The nodes share this machine's CPUs; each claims all of them (slurmd
  # refuses a node that claims more than it sees) and a little memory.
  local cpus gres=""
  cpus=$(nproc)
  write_gres
  [ "$GPUS" -gt 0 ] && gres=" Gres=gpu:h200:$GPUS"
  {
    gs_slurm_plugin_conf
    [ "$GPUS" -gt 0 ] && [ -z "$NODE_LINES" ] && echo "GresTypes=gpu"
    [ -n "$PROLOG" ] && printf 'Prolog=%s\nPrologFlags=Alloc\n' "$PROLOG"
    [ -n "$EPILOG" ] && echo "Epilog=$EPILOG"
    cat <<CONF
ClusterName=$CLUSTER
SlurmctldHost=$(hostname -s)($NET.1)
SlurmctldPort=$CTLD_PORT
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmdSpoolDir=$SPOOL/%n
StateSaveLocation=$SPOOL/ctld
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmdTimeout=$SLURMD_TIMEOUT
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStorageEnforce=associations
PriorityType=priority/multifactor
PriorityWeightFairshare=10000
AuthInfo=cred_expire=$CRED_EXPIRE
# The nodes share /tmp; mpi/pmix makes TmpFS/spmix_appdir_<uid>_<step>
# on every node, so a shared TmpFS fails the step's second node (EEXIST).
TmpFS=$SPOOL/%n/tmp
# A job is requeued (after a node fails) only when it asks: slurmrestd
# makes a job requeueable when its "requeue" key is there at all.
JobRequeue=0
MpiDefault=none
$(if [ -n "$NODE_LINES" ]; then cat "$NODE_LINES"; else
  echo "NodeName=gsn[1-3] NodeAddr=$NET.1[1-3] CPUs=$cpus RealMemory=1024 State=UNKNOWN$gres"; fi)
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=pair Nodes=gsn[1-2] MaxTime=INFINITE State=UP
CONF
  } > "$CONF"
}

# gres.conf beside slurm.conf: empty without fake GPUs.
write_gres() {
  local n i
  if [ -n "$GRES_CONF" ]; then cp "$GRES_CONF" "$CONF_DIR/gres.conf"; return 0; fi
  : > "$CONF_DIR/gres.conf"
  [ "$GPUS" -gt 0 ] || return 0
  mkdir -p "$RUN/dev"
  for n in $NODES; do
    for i in $(seq 0 $((GPUS - 1))); do
      [ -c "$RUN/dev/$n-gpu$i" ] || mknod "$RUN/dev/$n-gpu$i" c 1 3
      echo "NodeName=$n Name=gpu Type=h200 File=$RUN/dev/$n-gpu$i" >> "$CONF_DIR/gres.conf"
    done
  done
}

# slurmdbd.conf beside slurm.conf (slurmdbd finds it there through
# SLURM_CONF), with the database password: SlurmUser's alone.
write_dbd_conf() {
  (umask 077; cat > "$CONF_DIR/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$1
StorageLoc=gs_cluster_acct
CONF
  )
}

# ---------------------------------------------------------------- daemons

# A MariaDB for slurmdbd alone: a fresh data directory, TCP on loopback
# only, and a user "slurm" with a password made here.
start_db() {
  local pass
  mkdir -p "$DB_DIR"
  chown mysql:mysql "$DB_DIR"
  mariadb-install-db --user=mysql --datadir="$DB_DIR" --auth-root-authentication-method=socket \
    --skip-test-db > "$LOGS/mariadb-install.log" 2>&1 || die "mariadb-install-db failed (see $LOGS)"
  touch "$LOGS/mariadb.log" && chown mysql:mysql "$LOGS/mariadb.log"
  mariadbd --user=mysql --datadir="$DB_DIR" --socket="$DB_DIR/mysqld.sock" --port=$DB_PORT \
    --bind-address=127.0.0.1 --pid-file="$DB_DIR/mysqld.pid" --log-error="$LOGS/mariadb.log" \
    --innodb-buffer-pool-size=16M < /dev/null > /dev/null 2>&1 &
  echo $! > "$RUN/mariadbd.pid"
  wait_for 300 db_up || die "mariadbd did not start (see $LOGS/mariadb.log)"
  pass=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
  # On stdin, not in argv (which ps shows).
  mariadb -S "$DB_DIR/mysqld.sock" <<SQL || die "cannot make slurmdbd's database user"
CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON gs_cluster_acct.* TO 'slurm'@'127.0.0.1';
SQL
  write_dbd_conf "$pass"
}

# mariadbd answers on its socket; one that died stops the start at once.
db_up() {
  alive "$RUN/mariadbd.pid" || die "mariadbd exited (see $LOGS/mariadb.log)"
  test -S "$DB_DIR/mysqld.sock"
}

# slurmdbd, and this cluster in it (which also makes the root account).
start_dbd() {
  slurmdbd
  wait_for 300 sacctmgr -n show cluster >/dev/null 2>&1 || die "slurmdbd did not answer (see $LOGS/slurmdbd.log)"
  sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr could not add the cluster"
}


start_ctld() {
  slurmctld -f "$CONF"
}

start_slurmd() {
  in_node "$1" env SLURM_CONF="$CONF" slurmd -f "$CONF" -N "$1"
}

# slurmrestd will not run as root or SlurmUser: as gsrest, a system user
# made here. setpriv execs (no fork as runuser does), so $! is slurmrestd.
# SLURM_JWT=daemon makes it talk to slurmctld with auth/jwt, passing each
# request's token through; without it it uses auth/munge, which refuses a
# client's token ("Rejecting thread config token for user root").
start_rest() {
  id "$REST_USER" >/dev/null 2>&1 ||
    useradd --system --no-create-home --shell /usr/sbin/nologin "$REST_USER"
  setpriv --reuid "$REST_USER" --regid "$REST_USER" --init-groups \
    env SLURM_CONF="$CONF" SLURM_JWT=daemon slurmrestd -a rest_auth/jwt -s openapi/v0.0.38 "$REST_ADDR" \
    >> "$LOGS/slurmrestd.log" 2>&1 < /dev/null &
  echo $! > "$RUN/slurmrestd.pid"
}

# Wait up to $1 tenths of a second for `$2...` to succeed.
wait_for() {
  local t=$1 i; shift
  for i in $(seq "$t"); do "$@" && return 0; sleep 0.1; done
  return 1
}
all_idle() {
  [ "$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u | grep -c ' idle$')" -eq 3 ]
}
rest_up() {
  curl -s -o /dev/null "http://$REST_ADDR/openapi/v3"
}

# Kill the processes in these pid files at once (a daemon takes a second
# or more to shut down), and wait until they are gone; -9 after 10 s.
stop_pidfiles() {
  local f pids=""
  for f in "$@"; do
    alive "$f" && pids="$pids $(cat "$f")"
    rm -f "$f"
  done
  [ -n "$pids" ] || return 0
  kill $pids 2>/dev/null || true
  wait_for 100 gone $pids || { kill -9 $pids 2>/dev/null || true; wait_for 20 gone $pids || true; }
}
gone() {
  local p
  for p in "$@"; do ! kill -0 "$p" 2>/dev/null || return 1; done
}

# Whatever is left in the nodes' netns (slurmstepd, job tasks: the cluster
# is going away, so no grace period).
stop_node_leftovers() {
  local n pids=""
  for n in $NODES; do
    if ip netns list | grep -qw "^$n"; then pids="$pids $(ip netns pids "$n")"; fi
  done
  [ -n "${pids// /}" ] || return 0
  kill -9 $pids 2>/dev/null || true
  wait_for 20 gone $pids || true
}

# ---------------------------------------------------------------- commands

cmd_start() {
  if alive "$RUN/slurmctld.pid" || ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "already running (or left over): run '$0 stop' first, or '$0 restart'"
  fi
  gs_slurm_install
  command -v slurmrestd >/dev/null || apt-get install -y -qq slurmrestd >/dev/null
  command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmdbd mariadb-server >/dev/null
  # auth/jwt is a separate Debian package (libjwt).
  [ -f /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so ] ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm-jwt-plugin >/dev/null
  mkdir -p "$RUN"
  # munged is shared with the one-node scripts: remember whether we started
  # it, so that stop leaves a munged that was there before.
  if pgrep -x munged >/dev/null; then rm -f "$RUN/munge-ours"; else touch "$RUN/munge-ours"; fi
  gs_slurm_start_munge
  # A fresh controller state: no jobs or node states from a previous run.
  rm -rf "${SPOOL:?}"
  write_conf
  net_up
  hosts_add
  start_db
  start_dbd
  start_ctld
  local n
  for n in $NODES; do start_slurmd "$n"; done
  wait_for 300 all_idle || { sinfo -N >&2 || true; die "the nodes did not come up idle (see $LOGS)"; }
  start_rest
  wait_for 100 rest_up || die "slurmrestd did not answer on $REST_ADDR (see $LOGS/slurmrestd.log)"
  cmd_status
}

cmd_stop() {
  local n
  stop_pidfiles "$RUN/slurmrestd.pid" "$RUN/slurmctld.pid" $(for n in $NODES; do echo "$RUN/slurmd-$n.pid"; done)
  stop_pidfiles "$RUN/slurmdbd.pid"
  stop_pidfiles "$RUN/mariadbd.pid"
  stop_node_leftovers
  net_down
  hosts_remove
  rm -rf "$RUN/dev"
  # munged only if this script started it and no other Slurm needs it.
  if [ -f "$RUN/munge-ours" ] && ! pgrep -x slurmctld >/dev/null && ! pgrep -x slurmd >/dev/null; then
    stop_pidfiles /run/munge/munged.pid
  fi
  rm -f "$RUN/munge-ours"
  echo "slurm-cluster: stopped"
}

cmd_status() {
  local n f
  echo "export SLURM_CONF=$CONF"
  echo "slurmrestd: http://$REST_ADDR (JWT: scontrol token username=root lifespan=600)"
  for f in mariadbd slurmdbd slurmctld slurmd-gsn1 slurmd-gsn2 slurmd-gsn3 slurmrestd; do
    if alive "$RUN/$f.pid"; then echo "$f: running, pid $(cat "$RUN/$f.pid")"; else echo "$f: not running"; fi
  done
  for n in $NODES; do
    ip netns list | grep -qw "^$n" && echo "$n: netns, $(node_ip "$n"), hostname $(in_node "$n" hostname 2>/dev/null || echo ?)"
  done
  if alive "$RUN/slurmctld.pid"; then sinfo -N -o '%N %P %t %c %m %G' || true; fi
}

# Run a command inside a node (network + hostname), e.g. `exec gsn1 hostname`.
cmd_exec() {
  [ $# -ge 2 ] || die "usage: $0 exec NODE CMD..."
  in_node "$@"
}

[ "$(id -u)" -eq 0 ] || die "needs root"
case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart) cmd_stop; cmd_start ;;
  status) cmd_status ;;
  exec) shift; cmd_exec "$@" ;;
  *) die "usage: $0 start|stop|restart|status|exec NODE CMD..." ;;
esac
