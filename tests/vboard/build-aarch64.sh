#!/usr/bin/env bash
# Builds the static aarch64 agent and checks that it is one:
#   bash tests/vboard/build-aarch64.sh              # the board build (release, no `fleet serve`)
#   bash tests/vboard/build-aarch64.sh --operator   # the operator's: default features (`fleet
#                                                   # serve`), profile `operator`
# Installs nothing. Needs: rustup target add aarch64-unknown-linux-musl; for crates with C parts
# (ring) gcc-aarch64-linux-gnu + libc6-dev-arm64-cross; `file` or `readelf` for the check.
# Linker and C compiler come from .cargo/config.toml. Honours CARGO_TARGET_DIR.
# Prints the binary's path on the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=aarch64-unknown-linux-musl
start=$(date +%s)
# The board build: the plain release profile without the default features (`serve`, the
# operator's fleet service, is not for boards: docs/development.md "Deviations"). The operator's
# build (the npu-agent-operator package, packaging/build-debs.sh) keeps them, with the profile
# the amd64 package uses.
case "${1:-}" in
  "") profile=release; build=(--release --no-default-features) ;;
  --operator) profile=operator; build=(--profile operator) ;;
  *) echo "build-aarch64: unknown option $1 (--operator or nothing)" >&2; exit 2 ;;
esac
bin="${CARGO_TARGET_DIR:-target}/$target/$profile/npu-agent"
# `cargo build`, or under .ci/run the file of an earlier build with the same inputs.
# shellcheck source=/dev/null # (.ci/build-cache.sh, linted by itself)
. .ci/build-cache.sh
cached_build "$bin" --locked "${build[@]}" --target "$target"
[ -x "$bin" ] || { echo "build-aarch64: $bin missing after the build" >&2; exit 1; }

# Statically linked: `file` says so, and the ELF has no interpreter and no NEEDED libraries.
if command -v file >/dev/null 2>&1; then
  desc=$(file -b "$bin")
  echo "build-aarch64: $desc" >&2
  case "$desc" in
    *"ARM aarch64"*) ;;
    *) echo "build-aarch64: not an aarch64 ELF" >&2; exit 1 ;;
  esac
  case "$desc" in
    *"statically linked"*|*"static-pie linked"*) ;;
    *) echo "build-aarch64: not statically linked" >&2; exit 1 ;;
  esac
fi
if command -v readelf >/dev/null 2>&1; then
  if readelf -lW "$bin" | grep -q 'INTERP' || readelf -dW "$bin" | grep -q '(NEEDED)'; then
    echo "build-aarch64: has an ELF interpreter or NEEDED entries" >&2
    exit 1
  fi
fi
size=$(stat -c %s "$bin")
echo "build-aarch64: static, $size bytes ($(( (size + 1023) / 1024 )) KiB), built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
