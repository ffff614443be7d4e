#!/usr/bin/env bash
# CPU seconds per process over the active phase of a 1,000-Application run on the real env
# (../shared/realenv; REALK8S as its README sets it): the hub's kube-apiserver, etcd,
# kube-controller-manager, the OCM hub controllers, the controller under test, and the machine's
# idle time. Start-up and the steady state are left out, unlike measure.sh's totals.
#
#   hack/perf-cpu-split.sh floor            1,000 Applications + 1,000 works by perfload at once
#   hack/perf-cpu-split.sh ctl CMD [ARGS]   CMD started, 3 s warm-up, then 1,000 Applications by
#                                           perfload until all 1,000 works exist
#   NOWAIT=1 hack/perf-cpu-split.sh ctl …    the same without waiting for works (a CMD that writes
#                                           none, e.g. `sleep 1000`: the Applications' own cost)
# Prints the wall seconds of the phase and `name=cpu_seconds` per process (docs/performance.md,
# "Basic pull model on a real API server").
set -uo pipefail
: "${REALK8S:?set REALK8S to the real env (../shared/realenv/README.md)}"
export KUBECONFIG=$REALK8S/hub.kubeconfig
PL=$REALK8S/peer/bin/perfload
N=${N:-1000}
MODE=${1:?usage: perf-cpu-split.sh floor | ctl CMD [ARGS...]}
shift
declare -A P=(
  [apiserver]=$(pgrep -f 'kube-apiserver.*2379')
  [etcd]=$(pgrep -f 'etcd --name hub')
  [kcm]=$(pgrep -f 'kube-controller-manager.*hub.kubeconfig')
  [registration]=$(pgrep -f 'registration controller')
  [addon]=$(pgrep -f 'addon manager')
  [placement]=$(pgrep -f 'placement controller')
)
TMP=$(mktemp -d)
CPID=
cleanup() {
  [ -n "$CPID" ] && kill -TERM "$CPID" 2>/dev/null && wait "$CPID"
  rm -rf "$TMP"
}
trap cleanup EXIT
HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
snap() {
  for k in "${!P[@]}"; do echo "$k $(ticks "${P[$k]}")"; done
  [ -n "$CPID" ] && echo "controller $(ticks "$CPID")"
  awk '/^cpu / { print "busy", $2 + $3 + $4 + $7 + $8; print "idle", $5 + $6 }' /proc/stat
}

"$PL" cleanup >/dev/null
"$PL" clusters -count "${CLUSTERS:-20}" >/dev/null
if [ "$MODE" = ctl ]; then
  "$@" >"$TMP/controller.log" 2>&1 &
  CPID=$!
  sleep "${WARMUP_S:-3}"
fi
snap >"$TMP/0"
t0=$(date +%s.%N)
if [ "$MODE" = floor ]; then
  "$PL" apps -count "$N" >/dev/null &
  a=$!
  "$PL" works -count "$N" >/dev/null &
  w=$!
  wait $a
  wait $w
else
  "$PL" apps -count "$N" >/dev/null
fi
[ -z "${NOWAIT:-}" ] && "$PL" wait -count "$N" >/dev/null
t1=$(date +%s.%N)
snap >"$TMP/1"
echo "MODE=$MODE N=$N secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" \
  "$(join <(sort "$TMP/0") <(sort "$TMP/1") | awk -v hz="$HZ" '{ printf " %s=%.2f", $1, ($3 - $2) / hz }')"
cleanup
CPID=
trap - EXIT
"$PL" cleanup >/dev/null
