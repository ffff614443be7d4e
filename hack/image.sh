#!/usr/bin/env bash
# Builds the argocd-pull image with buildah (no Docker daemon) and writes it as an OCI archive:
#
#   hack/image.sh OUT.tar
#
# FROM scratch + CA certificates + one statically linked (musl), stripped release binary;
# ENTRYPOINT ["/argocd-pull"], USER 65532, OCI labels (source, version, revision). The same image
# as ./Containerfile describes for Docker users.
#
# Environment:
#   BIN=path            use this static binary instead of building one
#   TARGET=triple       Rust target (default x86_64-unknown-linux-musl; aarch64-unknown-linux-musl for arm64)
#   IMAGE=name:tag      reference stored in the archive (default ghcr.io/argocd-pull/argocd-pull:<version>)
#   CARGO_TARGET_DIR    where cargo builds (default target/)
# buildah runs with vfs storage and chroot isolation (STORAGE_DRIVER / BUILDAH_ISOLATION override).
set -euo pipefail
out=${1:?usage: hack/image.sh OUT.tar}
root=$(cd "$(dirname "$0")/.." && pwd)
case $out in /*) ;; *) out=$PWD/$out ;; esac

command -v buildah >/dev/null || { echo "image.sh: buildah not found (apt-get install buildah)" >&2; exit 1; }
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs} BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml")
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
source_url=$(sed -n '/^\[workspace.package\]/,/^\[/s/^repository = "\(.*\)"/\1/p' "$root/Cargo.toml")
target=${TARGET:-x86_64-unknown-linux-musl}
image=${IMAGE:-ghcr.io/argocd-pull/argocd-pull:$version}
case $target in
  x86_64-*) arch=amd64 ;;
  aarch64-*) arch=arm64 ;;
  *) echo "image.sh: unsupported TARGET $target" >&2; exit 1 ;;
esac

if [[ -z ${BIN:-} ]]; then
  "$root/hack/build-static.sh" "$target"
  BIN=${CARGO_TARGET_DIR:-$root/target}/$target/release/argocd-pull
fi
[[ -x $BIN ]] || { echo "image.sh: $BIN is not an executable" >&2; exit 1; }
if ! file -b "$BIN" | grep -q 'static'; then
  echo "image.sh: $BIN is not statically linked: $(file -b "$BIN")" >&2
  exit 1
fi
ca=/etc/ssl/certs/ca-certificates.crt
[[ -f $ca ]] || { echo "image.sh: $ca missing (apt-get install ca-certificates)" >&2; exit 1; }

ctr=$(buildah from --arch "$arch" scratch)
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah copy --chmod 0644 "$ctr" "$ca" /etc/ssl/certs/ca-certificates.crt >/dev/null
buildah copy --chmod 0755 "$ctr" "$BIN" /argocd-pull >/dev/null
buildah config \
  --arch "$arch" --os linux \
  --label org.opencontainers.image.source="$source_url" \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.revision="$revision" \
  --label org.opencontainers.image.title=argocd-pull \
  --label org.opencontainers.image.description="Argo CD pull-model delivery for Open Cluster Management fleets" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --env PATH=/ --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --user 65532:65532 \
  --entrypoint '["/argocd-pull"]' --cmd '' \
  "$ctr"
id=$(buildah commit --format oci --rm "$ctr" "$image")
trap - EXIT
rm -f "$out"
buildah push "$id" "oci-archive:$out:$image" >/dev/null
echo "image.sh: $image ($arch) -> $out"
