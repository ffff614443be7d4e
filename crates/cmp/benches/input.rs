//! The benchmark input: `count` realistic documents (Deployments, Services, ConfigMaps), each
//! padded with real content (env entries, labels, config lines — no comments) to about
//! `bytes_per_doc` bytes, as one multi-document YAML stream.

pub fn stream(count: usize, bytes_per_doc: usize) -> String {
    let mut out = String::with_capacity(count * (bytes_per_doc + 128));
    for i in 0..count {
        let start = out.len();
        let ns = i % 50;
        out.push_str("---\n");
        match i % 3 {
            0 => {
                out.push_str(&format!(
                    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\n  namespace: ns-{ns}\n  labels:\n    app: app-{i}\n  annotations:\n    note: \"0755\"\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: app-{i}\n  template:\n    metadata:\n      labels:\n        app: app-{i}\n    spec:\n      containers:\n      - name: main\n        image: \"registry.example.com/app:1.10\"\n        args: [\"--port=8080\", \"--verbose\"]\n        resources:\n          requests: {{cpu: 10m, memory: 32Mi}}\n        env:\n"
                ));
                let mut k = 0;
                while out.len() - start < bytes_per_doc {
                    out.push_str(&format!("        - name: SETTING_{k}\n          value: \"value-{k}-abcdefghijklmnopqrstuvwxyz\"\n"));
                    k += 1;
                }
            }
            1 => {
                out.push_str(&format!(
                    "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  namespace: ns-{ns}\n  labels:\n"
                ));
                let mut k = 0;
                while out.len() - start < bytes_per_doc - 120 {
                    out.push_str(&format!(
                        "    example.com/label-{k}: \"value-{k}-abcdefghijklmnopqrstuvwxyz\"\n"
                    ));
                    k += 1;
                }
                out.push_str(&format!("spec:\n  selector:\n    app: app-{i}\n  ports:\n  - name: http\n    port: 80\n    targetPort: 8080\n"));
            }
            _ => {
                out.push_str(&format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  namespace: ns-{ns}\ndata:\n  version: \"1.10\"\n  config.txt: |\n"
                ));
                let mut k = 0;
                while out.len() - start < bytes_per_doc {
                    out.push_str(&format!(
                        "    line {k}: the quick brown fox jumps over the lazy dog 0123456789\n"
                    ));
                    k += 1;
                }
            }
        }
    }
    out
}
