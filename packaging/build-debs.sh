#!/usr/bin/env bash
# Builds npu-agent's two Debian packages with cargo-deb (metadata: [package.metadata.deb] in
# Cargo.toml), lints them, and prints the unit's sandbox review:
#   bash packaging/build-debs.sh
# Output (the last two lines of stdout are the two paths), both with the man pages and shell
# completions generated into packaging/generated/ first:
#   ${CARGO_TARGET_DIR:-target}/debian/npu-agent_<version>-1_arm64.deb  the static aarch64 musl
#       build (tests/vboard/build-aarch64.sh, reused when up to date); no dependencies
#   ${CARGO_TARGET_DIR:-target}/debian/npu-agent_<version>-1_amd64.deb  the host build with
#       profile `operator` (release at opt-level 3, for `fleet serve`; glibc; depends on libc6)
# Needs: cargo-deb (cargo install cargo-deb --locked), dpkg-dev; for the lint and the review:
# lintian, systemd (systemd-analyze). tests/system/package.rs asserts on these packages.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}
out="$target_dir/debian"
mkdir -p "$out"
command -v cargo-deb >/dev/null || { echo "build-debs: cargo-deb missing: cargo install cargo-deb --locked" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || { echo "build-debs: cannot read the package version" >&2; exit 1; }

# The man pages and shell completions, generated from the clap definitions (examples/gen_docs.rs;
# the assets in Cargo.toml take them from packaging/generated/, which git ignores).
rm -rf packaging/generated
cargo run --locked --quiet --example gen_docs -- packaging/generated >&2

# arm64: the static musl binary boards run (built and checked static by build-aarch64.sh).
bash tests/vboard/build-aarch64.sh >/dev/null
rm -f "$out"/npu-agent_*_arm64.deb "$out"/npu-agent_*_amd64.deb
# --strip: strip's --remove-section=.comment,.note (cargo's `strip = true` keeps them), with the
# cross binutils for aarch64 (installed with gcc-aarch64-linux-gnu).
env "STRIP_aarch64-unknown-linux-musl=aarch64-linux-gnu-strip" \
  cargo deb --locked --no-build --strip --target aarch64-unknown-linux-musl --output "$out/npu-agent_${version}-1_arm64.deb" >&2
# amd64: the operator's machine (`fleet serve` checks every board's seal): profile `operator`.
cargo deb --locked --strip --profile operator --output "$out/npu-agent_${version}-1_amd64.deb" >&2

for deb in "$out/npu-agent_${version}-1_arm64.deb" "$out/npu-agent_${version}-1_amd64.deb"; do
  echo "build-debs: $deb ($(stat -c %s "$deb") bytes)" >&2
  dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Architecture\|Depends\|Installed-Size\):/  \1:/p' >&2
done

# Lint (informational here; tests/system/package.rs fails on any error or warning not overridden).
if command -v lintian >/dev/null; then
  for deb in "$out/npu-agent_${version}-1_arm64.deb" "$out/npu-agent_${version}-1_amd64.deb"; do
    echo "build-debs: lintian $(basename "$deb"):" >&2
    lintian --info --display-info --show-overrides "$deb" >&2 || true
  done
fi
# The unit's sandbox, as systemd scores it (lower is better; 2-3 is "OK").
if command -v systemd-analyze >/dev/null; then
  echo "build-debs: systemd-analyze security --offline=yes systemd/npu-agent.service:" >&2
  systemd-analyze security --offline=yes --no-pager systemd/npu-agent.service >&2 || true
fi
echo "$out/npu-agent_${version}-1_arm64.deb"
echo "$out/npu-agent_${version}-1_amd64.deb"
