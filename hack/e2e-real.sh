#!/usr/bin/env bash
# Every env-gated real-cluster test suite of the workspace, against one OCM hub and one managed
# cluster (by default the real env of ../shared/realenv in $REALK8S), one suite after another:
#
#   controller  e2e::real_cluster_round_trip (plays the spoke's Argo CD when none runs there),
#               faults::* (the two that stop the hub API server only with --disruptive)
#   gitops      e2e::* (GitOpsCluster v1beta1), addon_e2e::* (argoCDAgentAddon, two controller
#               instances, OCM's addon manager and work agent), faults::* (the hub API server
#               SIGKILLed mid-load under `argocd-pull controller`; only with --disruptive)
#   cmp         real_cluster::* (works to a cluster; a Placement fanned out by OCM's
#               ManifestWorkReplicaSet controller)
#   agent       real_cluster* (principal + agents, autonomous and managed; logs/exec and kubectl
#               through the resource proxy)
#   packaging   dry_run::* (the charts through the hub's server-side dry run)
#   ctl         real::* (argocd-pull ctl: pki, agent, jwt, blocklist and validate against the
#               hub as the principal's cluster and cluster1 as the agent's)
#   ha          real::* (three `principal --ha-mode active-active` processes with shard Leases on
#               the hub, 30 agent processes on cluster1 through one balancer, one replica killed)
#
# The test binaries are built first, without the lock, with the workspace's features
# (`--workspace --test <target>`: the same build `cargo test --workspace` makes, so nothing is
# built twice); each suite then runs under `flock -o $REALK8S.lock` (the env is shared: others
# wait for the lock, and no suite holds it for more than its own few minutes; `-o` so that a
# daemon a suite restarts never inherits the lock). Every suite runs even when an earlier one
# failed; the summary
# lists each suite's result, time and SKIP lines; the exit status is 1 when any failed.
#
#   hack/e2e-real.sh                 # non-disruptive suites (the API-server faults print SKIP)
#   hack/e2e-real.sh --disruptive    # also stop/restart the hub API server (up.sh brings it back)
#   hack/e2e-real.sh gitops cmp      # only these suites
#
# Environment: REALK8S (default /root/realk8s), ARGOCD_PULL_FAULTS_BIN (default: the one built
# here), ARGOCD_PULL_E2E_HUB_KUBECONFIG,
# ARGOCD_PULL_E2E_MANAGED_KUBECONFIG, ARGOCD_PULL_E2E_CLUSTER (defaults: the real env's),
# E2E_REAL_LOGS (default a temp dir: one log per suite).
set -uo pipefail
cd "$(dirname "$0")/.."

REALK8S=${REALK8S:-/root/realk8s}
export REALK8S
export ARGOCD_PULL_E2E_HUB_KUBECONFIG=${ARGOCD_PULL_E2E_HUB_KUBECONFIG:-$REALK8S/hub.kubeconfig}
export ARGOCD_PULL_E2E_MANAGED_KUBECONFIG=${ARGOCD_PULL_E2E_MANAGED_KUBECONFIG:-$REALK8S/managed.kubeconfig}
export ARGOCD_PULL_E2E_CLUSTER=${ARGOCD_PULL_E2E_CLUSTER:-cluster1}
LOCK=${REALK8S%/}.lock
LOGS=${E2E_REAL_LOGS:-$(mktemp -d -t argocd-pull-e2e-real.XXXXXX)}
mkdir -p "$LOGS"

# suite name | package | test target | test-name filters
SUITES=(
  "cmp|argocd-pull-cmp|cmp|real_cluster::"
  "agent|argocd-pull-agent|loopback|real_cluster"
  "packaging|argocd-pull-packaging|packaging|dry_run::"
  "ctl|argocd-pull|ctl|real::"
  "fleet|argocd-pull|fleet|real::"
  "ha|argocd-pull|ha|real::"
  # gitops and controller last: with --disruptive they restart the hub API server, after which
  # OCM's agents on cluster1 take a while to reconnect (the cmp fan-out waits for their status).
  # gitops one test at a time: e2e:: runs GitOpsCluster controllers in the test process, which
  # must not run beside faults::'s `argocd-pull controller`, nor while it kills the API server
  "gitops|argocd-pull-gitops|gitops|e2e:: addon_e2e:: faults:: --test-threads=1"
  "controller|argocd-pull-controller|controller|e2e::real_cluster_round_trip faults::"
)

only=()
for a in "$@"; do
  case "$a" in
    --disruptive) export ARGOCD_PULL_E2E_DISRUPTIVE=1 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) only+=("$a") ;;
  esac
done
selected=()
for s in "${SUITES[@]}"; do
  name=${s%%|*}
  if [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $name "* ]]; then selected+=("$s"); fi
done
[ ${#selected[@]} -gt 0 ] || { echo "no such suite: ${only[*]} (suites: controller gitops cmp agent packaging ctl fleet ha)" >&2; exit 2; }

for f in "$ARGOCD_PULL_E2E_HUB_KUBECONFIG" "$ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"; do
  [ -r "$f" ] || { echo "cannot read kubeconfig $f (set REALK8S or ARGOCD_PULL_E2E_*_KUBECONFIG)" >&2; exit 2; }
done

start=$SECONDS
targets=()
for s in "${selected[@]}"; do
  IFS='|' read -r _ _ target _ <<<"$s"
  targets+=(--test "$target")
done
# `--test ctl` also builds the argocd-pull binary, which the controller suite's ApplicationSet
# fault test and the gitops suite's fault tests run (ARGOCD_PULL_FAULTS_BIN, exported below to
# every suite)
[[ " ${targets[*]} " == *" ctl "* ]] || targets+=(--test ctl)
echo "== building the test binaries: cargo test --workspace ${targets[*]} --no-run"
cargo test --quiet --workspace "${targets[@]}" --no-run || exit 1
target_dir=${CARGO_TARGET_DIR:-target}
[[ $target_dir == /* ]] || target_dir=$PWD/$target_dir # CARGO_TARGET_DIR may be absolute
export ARGOCD_PULL_FAULTS_BIN=${ARGOCD_PULL_FAULTS_BIN:-$target_dir/debug/argocd-pull}
built=$((SECONDS - start))

if [ -x "$REALK8S/up.sh" ]; then
  echo "== $REALK8S/up.sh (starts what is not running)"
  flock -o "$LOCK" "$REALK8S/up.sh" >"$LOGS/up.log" 2>&1 || { echo "up.sh failed; see $LOGS/up.log" >&2; exit 1; }
fi

summary=()
failed=0
for s in "${selected[@]}"; do
  IFS='|' read -r name pkg target filters <<<"$s"
  log="$LOGS/$name.log"
  echo "== $name ($pkg): cargo test --workspace --test $target -- $filters (log: $log)"
  t0=$SECONDS
  # shellcheck disable=SC2086 # the filters are words
  flock -o "$LOCK" cargo test --quiet --workspace --test "$target" -- $filters --nocapture >"$log" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  passed=$(grep -Eo '[0-9]+ passed' "$log" | awk '{n+=$1} END {print n+0}')
  skips=$(grep -o 'SKIP: [^ ]*' "$log" | wc -l)
  if [ $rc -eq 0 ]; then result=ok; else result=FAILED; failed=1; grep -E '^(test .* FAILED|thread .* panicked|failures:)' -A3 "$log" | head -40; fi
  grep -o 'SKIP: .*' "$log" | sed 's/^/   /'
  summary+=("$(printf '%-11s %-7s %4ss  %2s passed  %s SKIP' "$name" "$result" "$took" "$passed" "$skips")")
done

echo
echo "== real-cluster suites (build ${built}s, total $((SECONDS - start))s; logs in $LOGS)"
printf '%s\n' "${summary[@]}"
[ "${ARGOCD_PULL_E2E_DISRUPTIVE:-}" = 1 ] || echo "(the fault tests that stop the hub API server were skipped: add --disruptive)"
exit $failed
