//! Prints the benchmark input (5,000 documents, ~10 MiB) for RSS measurements of the binary:
//! `cargo run --release -p argocd-pull-cmp --example bench_input > /tmp/in.yaml`.

#[path = "../benches/input.rs"]
mod input;

fn main() {
    print!("{}", input::stream(5000, 2097));
}
