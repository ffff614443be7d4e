#!/usr/bin/env bash
# Release binaries: static Linux tarballs with SHA-256 checksums.
#
#   hack/release.sh [OUT_DIR]          # default target/dist/ (CARGO_TARGET_DIR/dist)
#
# For each of TARGETS (default: x86_64-unknown-linux-musl aarch64-unknown-linux-musl) it builds the
# static, stripped release binary (hack/build-static.sh) and writes
#   argocd-pull-<version>-linux-<arch>.tar.gz   (argocd-pull, README.md; reproducible: sorted,
#                                                owner 0, mtime of the last commit)
#   argocd-pull-<version>-checksums.txt          (sha256sum format)
# A target that cannot be built here (no Rust std, no C cross compiler) is reported with the reason;
# the script then exits 1 unless ALLOW_MISSING=1 (the tarballs that were built are kept).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${CARGO_TARGET_DIR:-$root/target}/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml")
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
targets=${TARGETS:-x86_64-unknown-linux-musl aarch64-unknown-linux-musl}
target_dir=${CARGO_TARGET_DIR:-$root/target}
built=() missing=()

for t in $targets; do
  case $t in
    x86_64-*) arch=amd64 ;;
    aarch64-*) arch=arm64 ;;
    *) echo "release: unsupported target $t" >&2; exit 1 ;;
  esac
  if ! log=$("$root/hack/build-static.sh" "$t" 2>&1); then
    reason=$(grep -m1 -e '^build-static:' -e '^error' <<<"$log" || tail -n1 <<<"$log")
    echo "release: linux-$arch NOT built: $reason" >&2
    missing+=("linux-$arch")
    continue
  fi
  bin=$target_dir/$t/release/argocd-pull
  if ! file -b "$bin" | grep -q 'static'; then
    echo "release: $bin is not statically linked: $(file -b "$bin")" >&2
    exit 1
  fi
  stage=$(mktemp -d)
  install -m 0755 "$bin" "$stage/argocd-pull"
  install -m 0644 "$root/README.md" "$stage/README.md"
  name=argocd-pull-$version-linux-$arch.tar.gz
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$stage" -cf - argocd-pull README.md | gzip -n -9 >"$out/$name"
  rm -rf "$stage"
  built+=("$name")
  echo "release: $name"
done

if ((${#built[@]})); then
  (cd "$out" && sha256sum "${built[@]}" >"argocd-pull-$version-checksums.txt")
  echo "release: $out/argocd-pull-$version-checksums.txt"
fi
if ((${#missing[@]})); then
  echo "release: missing: ${missing[*]}" >&2
  [[ ${ALLOW_MISSING:-0} == 1 ]] || exit 1
fi
