//! Differential check of the fast YAML tiers against serde-saphyr over any YAML files:
//! `cargo run --release -p argocd-pull-cmp --example differential -- DIR...`
//! Prints every document where a tier answers differently from serde-saphyr, and how many
//! documents each tier reads. Exits non-zero on a disagreement. With `SHOW_MISSED=1` it also
//! lists the documents serde-saphyr reads but the block tier leaves, and with `MINIMIZE=1`
//! stops at the first of them, printing the lines where the block tier first gives up.

use argocd_pull_cmp::{block_yaml, fast_yaml, source};

fn main() {
    let options = serde_saphyr::options! {
        legacy_octal_numbers: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
    };
    let (mut docs, mut block, mut events, mut bad) = (0, 0, 0, 0);
    for root in std::env::args().skip(1) {
        for entry in walkdir::WalkDir::new(root).into_iter().flatten() {
            let path = entry.path();
            if !path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            for chunk in source::yaml_chunks(&text) {
                docs += 1;
                let expected: Result<serde_json::Value, _> =
                    serde_saphyr::from_str_with_options(chunk.text, options.clone());
                let expected = expected.ok().map(|v| serde_json::to_string(&v).unwrap());
                if std::env::var_os("SHOW_MISSED").is_some()
                    && expected.is_some()
                    && block_yaml::parse_document(chunk.text, &options).is_none()
                {
                    println!("MISSED {} #{}", path.display(), chunk.index);
                    if std::env::var_os("MINIMIZE").is_some() {
                        println!("{}", minimize(chunk.text, &options));
                        std::process::exit(0);
                    }
                }
                for (tier, got, count) in [
                    (
                        "block",
                        block_yaml::parse_document(chunk.text, &options),
                        &mut block,
                    ),
                    (
                        "events",
                        fast_yaml::parse_document(chunk.text, &options),
                        &mut events,
                    ),
                ] {
                    if let Some(v) = got {
                        *count += 1;
                        let got = serde_json::to_string(&v).unwrap();
                        if expected.as_ref() != Some(&got) {
                            bad += 1;
                            println!(
                                "DISAGREE {tier} {} #{}\n  fast: {}\n  slow: {:?}",
                                path.display(),
                                chunk.index,
                                &got[..got.len().min(300)],
                                expected.as_ref().map(|e| &e[..e.len().min(300)])
                            );
                        }
                    }
                }
            }
        }
    }
    println!(
        "{docs} documents: block tier read {block}, event tier read {events}, {bad} disagreements"
    );
    std::process::exit(i32::from(bad > 0));
}

/// The first line at which a prefix of the document is read by serde-saphyr but not by the
/// block tier (prefixes ending in a block scalar header are skipped).
fn minimize(text: &str, options: &serde_saphyr::Options) -> String {
    let lines: Vec<&str> = text.lines().collect();
    for k in 1..=lines.len() {
        let last = lines[k - 1].trim_end();
        if last.ends_with(['|', '>', '-', ':']) {
            continue;
        }
        let t = lines[..k].join("\n") + "\n";
        if serde_saphyr::from_str_with_options::<serde_json::Value>(&t, options.clone()).is_ok()
            && block_yaml::parse_document(&t, options).is_none()
        {
            return lines[k.saturating_sub(6)..k].join("\n");
        }
    }
    String::new()
}
