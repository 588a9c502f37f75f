#!/usr/bin/env bash
# Builds the OCI container image of the static agent with umoci (Debian 12 `umoci`): no daemon,
# no registry, no base image. Layout: docs/image-guide.md "The container image".
#   bash packaging/oci/build-image.sh [--bin FILE] [--arch arm64|amd64] [--out DIR]
# --bin   a static npu-agent (default: the aarch64 musl build, made or found up to date by
#         tests/vboard/build-aarch64.sh)
# --arch  the image's architecture (default arm64; must match --bin)
# --out   the OCI image layout directory to write (default ${CARGO_TARGET_DIR:-target}/oci/npu-agent);
#         replaced if it exists. An oci-archive tar of it is written next to it (DIR.tar).
# The image holds /usr/bin/npu-agent, the build host's CA bundle (for mqtts:// without a
# ca_file) and the mount points under /host. Entrypoint `npu-agent`, command `run --root /host`
# (mount a writable state directory at /host/var/lib/npu-agent for it: no VOLUME is declared, so
# a plain `check` needs no mount point on a read-only host);
# `podman run IMAGE check --root /host` runs the checks once. Prints the layout's path and tag
# (`DIR:npu-agent:VERSION`, umoci's --image form) on the last line of stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="" arch=arm64 out="${CARGO_TARGET_DIR:-target}/oci/npu-agent"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "build-image: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=$(realpath -m "$out")
command -v umoci >/dev/null || { echo "build-image: umoci missing (apt-get install umoci)" >&2; exit 1; }
case "$arch" in arm64|amd64) ;; *) echo "build-image: --arch arm64 or amd64" >&2; exit 2 ;; esac
if [ -z "$bin" ]; then
  [ "$arch" = arm64 ] || { echo "build-image: --arch $arch needs --bin" >&2; exit 2; }
  bin=$(bash tests/vboard/build-aarch64.sh | tail -n 1)
fi
[ -x "$bin" ] || { echo "build-image: $bin is not an executable" >&2; exit 1; }
# The binary must be static: the image has no C library.
if command -v readelf >/dev/null && readelf -lW "$bin" | grep -q INTERP; then
  echo "build-image: $bin has an ELF interpreter (not static)" >&2; exit 1
fi
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
install -D -m 0755 "$bin" "$rootfs/usr/bin/npu-agent"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
fi
install -d -m 1777 "$rootfs/tmp"
# Mount points a runtime (or bwrap) mounts on: the container's own /proc, /sys, /dev, /run.
install -d -m 0755 "$rootfs/proc" "$rootfs/sys" "$rootfs/dev" "$rootfs/run"
# The host's parts are mounted here read-only; the state directory is the one writable mount.
for d in proc sys dev etc boot lib/modules var/log/journal var/lib/docker/containers \
  var/lib/containers var/log/pods var/lib/npu-agent; do
  install -d -m 0755 "$rootfs/host/$d"
done

rm -rf "$out" "$out.tar"
mkdir -p "$(dirname "$out")"
umoci init --layout "$out"
# The tag is a full name: `podman load` / `docker load` of the archive name it npu-agent:VERSION.
ref="$out:npu-agent:$version"
umoci new --image "$ref"
# One layer: the staged tree (umoci insert adds a directory's contents as one layer).
umoci insert --image "$ref" --history.created_by "packaging/oci/build-image.sh" "$rootfs" /
umoci config --image "$ref" --no-history \
  --architecture "$arch" --os linux \
  --created "$(date -u -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)" +%Y-%m-%dT%H:%M:%SZ)" \
  --config.entrypoint /usr/bin/npu-agent \
  --config.cmd run --config.cmd --root --config.cmd /host \
  --config.env container=oci \
  --config.env PATH=/usr/bin \
  --config.workingdir / \
  --config.label org.opencontainers.image.title=npu-agent \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label org.opencontainers.image.description="NPU board health agent; mount the host read-only at /host"
umoci gc --layout "$out"
tar -C "$out" --sort=name --owner=0 --group=0 --numeric-owner -cf "$out.tar" .
size=$(du -sb "$out" | cut -f1)
echo "build-image: $ref ($arch, $size bytes, archive $out.tar)" >&2
echo "$ref"
