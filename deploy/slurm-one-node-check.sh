#!/usr/bin/env bash
# slurm-one-node-check.sh BUILD_DIR - gpusrv's Slurm integration against a
# real Slurm (Debian's 22.05) on this one machine, with two fake GPUs (the
# fakegpu test plugin, device nodes made with mknod):
#   - slurmd registers the node from `gpusrv slurm node` and `gpusrv slurm gres`;
#   - a job with --gres=gpu:1 runs with `gpusrv slurm prolog` as slurmd's
#     Prolog: while it runs its GPU is booked as "slurm job N (user)";
#   - gpusrv killed (-9) and started again mid-job books it again;
#   - the Epilog releases it.
# Root only; it writes /etc/slurm/slurm.conf and gres.conf, starts munged,
# slurmctld and slurmd, and stops slurmctld, slurmd and its gpusrv at the
# end. Not part of `make test`: it takes over the machine's Slurm config.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "slurm-one-node-check: needs root" >&2; exit 1; }
B=$(cd "${1:-build}" && pwd)
W=$(mktemp -d /tmp/gs-slurm-XXXXXX)
PORT=18080
fail() { echo "slurm-one-node-check: FAILED: $*" >&2; exit 1; }
cleanup() {
  pkill -x slurmctld || true; pkill -x slurmd || true
  for _ in $(seq 100); do pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break; sleep 0.1; done
  rm -f /etc/slurm/gres.conf # its devices are gone with $W
  rm -rf /var/spool/slurmctld/* # its cluster name: another slurmctld would refuse the state
  [ -n "${SERVE:-}" ] && kill "$SERVE" 2>/dev/null || true
}
trap cleanup EXIT
. "$(dirname "$0")/slurm-common.sh"
gs_slurm_install
mknod "$W/nv0" c 1 3 && mknod "$W/nv1" c 1 3
export GPUSRV_PLUGIN_PATH=$B/tests/plugins-fake GPUSRV_TEST_FAKE_GPUS=2 \
  GPUSRV_TEST_FAKE_GPU_TYPE=1 GPUSRV_BACKENDS=cpu,fakegpu \
  GPUSRV_TEST_FAKE_DEV_NODES=$W/nv0,$W/nv1
pkill -x slurmctld || true; pkill -x slurmd || true; sleep 1
gs_slurm_start_munge
rm -rf /var/spool/slurmd/* /var/spool/slurmctld/*
mkdir -p "$W/models"
serve() {
  "$B/gpusrv" serve --model-repository "$W/models" --state-dir "$W/state" --http-port $PORT \
    --grpc-port 0 >> "$W/serve.log" 2>&1 &
  SERVE=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/v2/health/live" >/dev/null && return; sleep 0.1; done
  fail "gpusrv serve did not start: $(cat "$W/serve.log")"
}
serve
for hook in prolog epilog; do
  cat > "$W/$hook.sh" <<HOOK
#!/bin/sh
exec "$B/gpusrv" slurm $hook --url http://127.0.0.1:$PORT --token-file "$W/state/admin.token" 2>>"$W/hooks.log"
HOOK
  chmod +x "$W/$hook.sh"
done
{
  gs_slurm_base_conf gscheck
  cat <<CONF
Prolog=$W/prolog.sh
Epilog=$W/epilog.sh
$("$B/gpusrv" slurm node)
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
} > /etc/slurm/slurm.conf
"$B/gpusrv" slurm gres > /etc/slurm/gres.conf
slurmctld; slurmd
for _ in $(seq 50); do sinfo -h -N -o %t | grep -qx idle && break; sleep 0.2; done
state=$(sinfo -h -N -o "%t %G")
[[ "$state" == "idle gpu:"*":2,"* ]] || fail "the node did not register with two GPUs: $state"
echo "node registered: $state"
bookings() { curl -s -H "Authorization: Bearer $(cat "$W/state/admin.token")" "http://127.0.0.1:$PORT/api/v1/bookings"; }
srun --gres=gpu:1 sleep 6 > "$W/job.out" 2>&1 &
JOB=$!
for _ in $(seq 50); do bookings | grep -q '"slurm job' && break; sleep 0.1; done
b=$(bookings); echo "while the job runs: $b"
[[ "$b" == *'"owner":"slurm job '*' (root)"'*'"share":100'* ]] || fail "no booking while the job runs"
kill -9 "$SERVE"; wait "$SERVE" 2>/dev/null || true
serve
b=$(bookings); echo "after kill -9 and a new start: $b"
[[ "$b" == *'"owner":"slurm job '* ]] || fail "the booking did not come back after a restart"
wait "$JOB" || fail "the job failed: $(cat "$W/job.out" "$W/hooks.log")"
for _ in $(seq 50); do bookings | grep -q '"slurm job' || break; sleep 0.1; done
b=$(bookings); echo "after the job: $b"
[[ "$b" == '{"bookings":[]}' ]] || fail "the epilog did not release the booking"
echo "slurm-one-node-check: passed"
