#!/usr/bin/env bash
# The floor of issue 15 with the controller's own ManifestWorks: perfload's 1,000 Applications and,
# at the same time, 1,000 ManifestWorks whose content is byte for byte what `argocd-pull
# controller` writes for them (the Go peers' feedback rules, `feedbackScrapeType: Poll`,
# server-side apply with its ignore fields, `destination.name: ""`), written directly by
# perfload's client (50 + 50 concurrent clients). perfload's own works carry the Application
# manifest only, so the API server does less for each of them than for the controller's.
#
#   REALK8S=... hack/perf-floor-same-works.sh [N]     prints `FLOOR_SAME_WORKS N= all_s=`
#   hack/perf-floor-same-works.sh build               only (re)builds the load generator
#
# The load generator is perfload (`$REALK8S/src/ocm/cmd/perfload/main.go`, built by the real env's
# build.sh) with its manifestWork() replaced; it is built beside it as
# `$REALK8S/peer/bin/perfload-same-works` with the real env's Go toolchain and OCM's vendored
# client-go (offline). docs/performance.md, "Method" (floor) and "Basic pull model on a real API server".
set -euo pipefail
: "${REALK8S:?set REALK8S to the real env (../shared/realenv/README.md)}"
export KUBECONFIG=$REALK8S/hub.kubeconfig
PL=$REALK8S/peer/bin/perfload
PSW=$REALK8S/peer/bin/perfload-same-works
GO=${GO_NEW:-1.26.6}

build() {
  local dir=$REALK8S/src/ocm/cmd/perfload-same-works
  mkdir -p "$dir"
  python3 - "$REALK8S/src/ocm/cmd/perfload/main.go" "$dir/main.go" <<'PY'
import sys
src = open(sys.argv[1]).read()
start, end = src.index("func manifestWork(i int)"), src.index("// countWorks")
new = '''func manifestWork(i int) map[string]interface{} {
	app := application(i)
	md := app["metadata"].(map[string]interface{})
	delete(md, "annotations")
	delete(md, "labels")
	app["spec"].(map[string]interface{})["destination"].(map[string]interface{})["name"] = ""
	rules := []interface{}{}
	for _, r := range [][2]string{{"healthStatus", ".status.health.status"}, {"syncStatus", ".status.sync.status"},
		{"operationStateStartedAt", ".status.operationState.startedAt"},
		{"operationStatePhase", ".status.operationState.phase"}, {"syncRevision", ".status.sync.revision"}} {
		rules = append(rules, map[string]interface{}{"name": r[0], "path": r[1]})
	}
	cfg := map[string]interface{}{
		"feedbackRules":      []interface{}{map[string]interface{}{"jsonPaths": rules, "type": "JSONPaths"}},
		"feedbackScrapeType": "Poll",
		"resourceIdentifier": map[string]interface{}{"group": "argoproj.io", "name": md["name"], "namespace": appNs, "resource": "applications"},
		"updateStrategy": map[string]interface{}{"type": "ServerSideApply", "serverSideApply": map[string]interface{}{
			"fieldManager": "work-agent", "force": true,
			"ignoreFields": []interface{}{map[string]interface{}{"condition": "OnSpokeChange",
				"jsonPaths": []interface{}{".operation", ".metadata.annotations[\\"argocd.argoproj.io/refresh\\"]"}}}}},
	}
	return map[string]interface{}{
		"apiVersion": "work.open-cluster-management.io/v1",
		"kind":       "ManifestWork",
		"metadata": map[string]interface{}{
			"name":        fmt.Sprintf("perf-app-%d", i),
			"namespace":   cluster(i),
			"labels":      map[string]interface{}{pullLabel: "true"},
			"annotations": map[string]interface{}{"apps.open-cluster-management.io/hub-application-name": md["name"], "apps.open-cluster-management.io/hub-application-namespace": appNs},
		},
		"spec": map[string]interface{}{"workload": map[string]interface{}{"manifests": []interface{}{app}},
			"manifestConfigs": []interface{}{cfg}},
	}
}

'''
open(sys.argv[2], "w").write(src[:start] + new + src[end:])
PY
  (cd "$REALK8S/src/ocm" && env GOROOT="$REALK8S/toolchains/go$GO/go" PATH="$REALK8S/toolchains/go$GO/go/bin:$PATH" \
    GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 GOCACHE="$REALK8S/cache/go$GO" \
    GOPATH="$REALK8S/cache/gopath" go build -trimpath -ldflags "-s -w" -o "$PSW" ./cmd/perfload-same-works)
}

if [ "${1:-}" = build ]; then build; exit 0; fi
[ -x "$PSW" ] || build
N=${1:-1000}
"$PL" cleanup >/dev/null
"$PL" clusters -count "${CLUSTERS:-20}" >/dev/null
t0=$(date +%s.%N)
"$PL" apps -count "$N" >/dev/null &
a=$!
"$PSW" works -count "$N" >/dev/null &
w=$!
wait $a
wait $w
"$PL" wait -count "$N" >/dev/null
echo "FLOOR_SAME_WORKS N=$N all_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')"
