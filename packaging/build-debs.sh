#!/usr/bin/env bash
# Builds npu-agent's three Debian packages with cargo-deb (metadata: [package.metadata.deb] and its
# variant `operator` in Cargo.toml), lints them, and prints the unit's sandbox review:
#   bash packaging/build-debs.sh
# Output (the last three lines of stdout are the three paths), all with the man pages and shell
# completions generated into packaging/generated/ first:
#   ${CARGO_TARGET_DIR:-target}/debian/npu-agent_<version>-1_arm64.deb  the static aarch64 musl
#       board build (tests/vboard/build-aarch64.sh, reused when up to date; no `fleet serve`); no
#       dependencies
#   ${CARGO_TARGET_DIR:-target}/debian/npu-agent_<version>-1_amd64.deb  the host build with
#       profile `operator` (release at opt-level 3, for `fleet serve`; glibc; depends on libc6)
#   ${CARGO_TARGET_DIR:-target}/debian/npu-agent-operator_<version>-1_arm64.deb  the static
#       aarch64 musl build with `fleet serve` and profile `operator` (build-aarch64.sh --operator),
#       for an arm64 fleet server: the same files as npu-agent, which it replaces
# Needs: cargo-deb (cargo install cargo-deb --locked), dpkg-dev; for the lint and the review:
# lintian, systemd (systemd-analyze). tests/system/package.rs and package_operator.rs assert on
# these packages.
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

# arm64: the static musl binaries (built and checked static by build-aarch64.sh): the board's,
# and the operator's with `fleet serve`.
bash tests/vboard/build-aarch64.sh >/dev/null
bash tests/vboard/build-aarch64.sh --operator >/dev/null
arm="$out/npu-agent_${version}-1_arm64.deb"
amd="$out/npu-agent_${version}-1_amd64.deb"
arm_operator="$out/npu-agent-operator_${version}-1_arm64.deb"
rm -f "$arm" "$amd" "$arm_operator"
# --strip: strip's --remove-section=.comment,.note (cargo's `strip = true` keeps them), with the
# cross binutils for aarch64 (installed with gcc-aarch64-linux-gnu).
env "STRIP_aarch64-unknown-linux-musl=aarch64-linux-gnu-strip" \
  cargo deb --locked --no-build --strip --target aarch64-unknown-linux-musl --output "$arm" >&2
env "STRIP_aarch64-unknown-linux-musl=aarch64-linux-gnu-strip" \
  cargo deb --locked --no-build --strip --variant operator --profile operator \
  --target aarch64-unknown-linux-musl --output "$arm_operator" >&2
# amd64: the operator's machine (`fleet serve` checks every board's seal): profile `operator`
# (`cargo build`, or under .ci/run the file of an earlier build with the same inputs).
# shellcheck source=/dev/null # (.ci/build-cache.sh, linted by itself)
. .ci/build-cache.sh
cached_build "$target_dir/operator/npu-agent" --locked --profile operator
cargo deb --locked --no-build --strip --profile operator --output "$amd" >&2

for deb in "$arm" "$amd" "$arm_operator"; do
  echo "build-debs: $deb ($(stat -c %s "$deb") bytes)" >&2
  dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Architecture\|Depends\|Provides\|Conflicts\|Replaces\|Installed-Size\):/  \1:/p' >&2
done

# Lint (informational here; tests/system/package.rs and package_operator.rs fail on any error or
# warning not overridden). Not under CI (.ci/run), where those tests lint each package anyway:
# lintian takes seconds of CPU per package.
if [ -z "${CI:-}" ] && command -v lintian >/dev/null; then
  for deb in "$arm" "$amd" "$arm_operator"; do
    echo "build-debs: lintian $(basename "$deb"):" >&2
    lintian --info --display-info --show-overrides "$deb" >&2 || true
  done
fi
# The unit's sandbox, as systemd scores it (lower is better; 2-3 is "OK").
if command -v systemd-analyze >/dev/null; then
  echo "build-debs: systemd-analyze security --offline=yes systemd/npu-agent.service:" >&2
  systemd-analyze security --offline=yes --no-pager systemd/npu-agent.service >&2 || true
fi
echo "$arm"
echo "$amd"
echo "$arm_operator"
