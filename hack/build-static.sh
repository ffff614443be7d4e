#!/usr/bin/env bash
# Builds the static release binary for one Rust target: hack/build-static.sh [TARGET]
#   x86_64-unknown-linux-musl (default)  needs musl-gcc (Debian musl-tools) for the C parts (ring, Lua)
#   aarch64-unknown-linux-musl           needs an aarch64 musl C compiler (CC_aarch64_unknown_linux_musl,
#                                        default aarch64-linux-musl-gcc on PATH, else
#                                        hack/zig-cc-aarch64-musl if PyPI's ziglang is importable) and links with
#                                        aarch64-linux-gnu-gcc (Debian gcc-aarch64-linux-gnu) if present
# rustls everywhere (no OpenSSL); the release profile is fat LTO, one codegen unit, stripped.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:-x86_64-unknown-linux-musl}
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  rustup target add "$target" || {
    echo "build-static: the Rust std for $target is not installed and cannot be downloaded" >&2
    exit 1
  }
fi
case $target in
  x86_64-unknown-linux-musl)
    command -v musl-gcc >/dev/null || { echo "build-static: musl-gcc missing (apt-get install musl-tools)" >&2; exit 1; }
    export CC_x86_64_unknown_linux_musl=${CC_x86_64_unknown_linux_musl:-musl-gcc}
    ;;
  aarch64-unknown-linux-musl)
    cc=${CC_aarch64_unknown_linux_musl:-}
    if [[ -z $cc ]]; then
      if command -v aarch64-linux-musl-gcc >/dev/null; then
        cc=aarch64-linux-musl-gcc
      elif "${PYTHON:-python3}" -c 'import ziglang' 2>/dev/null; then
        cc=$root/hack/zig-cc-aarch64-musl
      else
        cc=aarch64-linux-musl-gcc
      fi
    fi
    command -v "$cc" >/dev/null || {
      echo "build-static: no aarch64 musl C compiler ($cc); pip install ziglang (hack/zig-cc-aarch64-musl)" \
        "or set CC_aarch64_unknown_linux_musl (e.g. a musl.cc aarch64-linux-musl-cross toolchain)" >&2
      exit 1
    }
    export CC_aarch64_unknown_linux_musl=$cc
    if command -v aarch64-linux-gnu-ar >/dev/null; then
      export AR_aarch64_unknown_linux_musl=${AR_aarch64_unknown_linux_musl:-aarch64-linux-gnu-ar}
    fi
    # Rust's self-contained musl (crt objects, libc.a) links with any aarch64 gcc driver.
    linker=$(command -v aarch64-linux-gnu-gcc || echo "$cc")
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER:-$linker}
    ;;
  *) echo "build-static: unsupported target $target" >&2; exit 1 ;;
esac
cd "$root"
cargo build --release --locked --target "$target" -p argocd-pull
