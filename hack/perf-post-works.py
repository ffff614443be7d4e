#!/usr/bin/env python3
"""POST N ManifestWorks straight to the real env's hub and print the kube-apiserver's CPU over them.

    REALK8S=... hack/perf-post-works.py KIND [N] [THREADS]

KIND is the work's content, all for the same Application:
  small     what perfload (the floor of issue 15) writes: the Application manifest only
  noconfig  the controller's manifest (with `destination.name`), no manifestConfigs
  noreport  + manifestConfigs as the Go peers write them: 5 feedback rules, server-side apply with
            its ignore fields (what the controller writes for an Application no ApplicationSet
            owns; before 4f3af2b only with `--appset-report false`)
  ours      + the ApplicationSet report's 14 rules (what the controller writes for an
            ApplicationSet-owned Application; before 4f3af2b, for every Application)
The same client (HTTP/1.1 keep-alive, one connection per thread, as kube-rs) sends every kind, so
the difference in the API server's CPU is the content's. Needs the perf namespaces
(`$REALK8S/peer/bin/perfload clusters -count 20`); the works carry the label `pw=x`, removed with
`kubectl delete manifestworks -A -l pw=x`. docs/performance.md, "Basic pull model on a real API server".
"""
import base64, copy, json, os, ssl, subprocess, sys, tempfile, threading, time, http.client

import yaml

APP = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
       "metadata": {"name": "perf-app-1", "namespace": "argocd"},
       "spec": {"destination": {"namespace": "default", "server": "https://kubernetes.default.svc"},
                "project": "default",
                "source": {"path": "guestbook", "repoURL": "https://github.com/argoproj/argocd-example-apps.git",
                           "targetRevision": "HEAD"},
                "syncPolicy": {"automated": {"prune": True}}}}
CONDITIONS = ["DeletionError", "InvalidSpecError", "ComparisonError", "SyncError", "UnknownError",
              "SharedResourceWarning", "RepeatedResourceWarning", "ExcludedResourceWarning",
              "OrphanedResourceWarning"]
BASIC = [("healthStatus", ".status.health.status"), ("syncStatus", ".status.sync.status"),
         ("operationStateStartedAt", ".status.operationState.startedAt"),
         ("operationStatePhase", ".status.operationState.phase"), ("syncRevision", ".status.sync.revision")]
REPORT = [("condition." + c, '.status.conditions[?(@.type=="%s")].message' % c) for c in CONDITIONS] + \
         [("resources." + f, ".status.resources[*]." + f) for f in ("kind", "name", "version", "group", "namespace")]


def spec(kind):
    app = copy.deepcopy(APP)
    if kind == "small":
        return {"workload": {"manifests": [app]}}
    app["spec"]["destination"]["name"] = ""
    s = {"workload": {"manifests": [app]}}
    if kind == "noconfig":
        return s
    rules = BASIC + (REPORT if kind == "ours" else [])
    s["manifestConfigs"] = [{
        "feedbackRules": [{"jsonPaths": [{"name": n, "path": p} for n, p in rules], "type": "JSONPaths"}],
        "feedbackScrapeType": "Poll",
        "resourceIdentifier": {"group": "argoproj.io", "name": "perf-app-1", "namespace": "argocd",
                               "resource": "applications"},
        "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {
            "fieldManager": "work-agent", "force": True,
            "ignoreFields": [{"condition": "OnSpokeChange",
                              "jsonPaths": [".operation", '.metadata.annotations["argocd.argoproj.io/refresh"]']}]}}}]
    return s


def main():
    kind = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    kc = yaml.safe_load(open(os.environ["REALK8S"] + "/hub.kubeconfig"))
    cluster, user = kc["clusters"][0]["cluster"], kc["users"][0]["user"]
    d = tempfile.mkdtemp()
    for key, f in (("certificate-authority-data", "ca"), ("client-certificate-data", "crt"), ("client-key-data", "key")):
        open(f"{d}/{f}", "wb").write(base64.b64decode(cluster.get(key) or user.get(key)))
    ctx = ssl.create_default_context(cafile=f"{d}/ca")
    ctx.load_cert_chain(f"{d}/crt", f"{d}/key")
    ctx.check_hostname = False
    body = spec(kind)
    works = []
    for i in range(n):
        ns = f"perf-{i % 20 + 1}"
        works.append((ns, json.dumps({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": f"pw-{kind}-{i}", "namespace": ns,
                         "labels": {"pw": "x", "apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"},
                         "annotations": {"apps.open-cluster-management.io/hub-application-name": "perf-app-1",
                                         "apps.open-cluster-management.io/hub-application-namespace": "argocd"}},
            "spec": body})))
    pid = subprocess.check_output(["pgrep", "-f", "kube-apiserver.*2379"]).split()[0].decode()
    hz = os.sysconf("SC_CLK_TCK")

    def ticks():
        f = open(f"/proc/{pid}/stat").read().split()
        return int(f[13]) + int(f[14])

    def worker(k):
        c = http.client.HTTPSConnection("127.0.0.1", 6443, context=ctx)
        for i in range(k, n, threads):
            ns, b = works[i]
            c.request("POST", f"/apis/work.open-cluster-management.io/v1/namespaces/{ns}/manifestworks"
                      "?fieldManager=argocd-pull", b, {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            if r.status != 201:
                sys.exit(f"POST {ns}/pw-{kind}-{i}: HTTP {r.status}")

    t0, c0 = time.time(), ticks()
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(f"KIND={kind} N={n} threads={threads} wall_s={time.time() - t0:.2f} "
          f"apiserver_cpu_s={(ticks() - c0) / hz:.2f} body_bytes={len(works[0][1])}")


if __name__ == "__main__":
    main()
