//! `cargo bench -p argocd-pull-cmp`: wrap 10 MiB of manifests (5,000 documents) in works.
//! Target: < 200 ms (see docs/perf/cmp.md; RSS is measured on the binary, not here).

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "input.rs"]
mod input;

fn options() -> argocd_pull_cmp::GenerateOptions {
    argocd_pull_cmp::GenerateOptions {
        work_name: "bench".into(),
        app_name: "bench".into(),
        app_namespace: "argocd".into(),
        target: argocd_pull_cmp::Target::Clusters(vec!["cluster1".into()]),
        max_work_bytes: argocd_pull_cmp::DEFAULT_MAX_WORK_BYTES,
        default_namespace: None,
        allow_empty: false,
        display_prefix: None,
    }
}

fn bench(c: &mut Criterion) {
    let text = input::stream(5000, 2097);
    eprintln!("input: {} documents, {} bytes", 5000, text.len());
    let options = options();
    let mut group = c.benchmark_group("cmp");
    group.sample_size(20);
    group.bench_function("generate_10MiB_5000_docs_stdin", |b| {
        b.iter(|| {
            let input = argocd_pull_cmp::Input::Stream {
                name: "<stdin>".into(),
                text: text.clone(),
            };
            let out = argocd_pull_cmp::generate(&input, &options).expect("generate");
            assert!(out.len() > text.len() / 2);
            out.len()
        })
    });
    // The same content as 5,000 files in a directory (the Argo CD source-directory path).
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, doc) in text.split("---\n").filter(|d| !d.is_empty()).enumerate() {
        std::fs::write(dir.path().join(format!("m{i:05}.yaml")), doc).expect("write");
    }
    group.bench_function("generate_10MiB_5000_files_dir", |b| {
        b.iter(|| {
            let input = argocd_pull_cmp::Input::Directory {
                path: dir.path().to_path_buf(),
                options: Default::default(),
            };
            argocd_pull_cmp::generate(&input, &options)
                .expect("generate")
                .len()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
