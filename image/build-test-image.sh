#!/bin/bash
# Builds a bootable arm64 Debian bookworm test image that holds npu-agent, the way a board image
# gets it: a root file system made by mmdebstrap, the .deb installed through install-into-image.sh
# (the entry point the Armbian and pi-gen hooks call) inside its chroot, and a separate boot
# partition. Used by tests/image.rs; usable by a person to try the agent under systemd:
#
#   bash image/build-test-image.sh --deb target/debian/npu-agent_<v>-1_arm64.deb --board rock5b OUT
#
# OUT then holds:
#   root.img    ext4 root file system (systemd as PID 1, npu-agent installed and enabled)
#   boot.img    the boot partition: ext4 with armbianEnv.txt (--board rock5b, mounted at /boot)
#               or FAT with config.txt + cmdline.txt (--board pi5, mounted at /boot/firmware),
#               both built from a folder without mounting (mkfs.ext4 -d, mkfs.vfat + mcopy)
#   vmlinuz     Debian's arm64 cloud kernel (linux-image-cloud-arm64)
#   initrd.img  a tiny busybox initramfs: loads virtio and vfat, mounts the root disk, switch_root
#   board.dtb   qemu's -M virt device tree renamed to the board (model, compatible, serial)
#   boot.sh     the qemu-system-aarch64 command that boots it (TCG; see --help of that file)
#
# Kernel choice, measured (bench numbers printed by this script and by tests/image.rs): a Debian
# kernel inside the image needs its initramfs built by update-initramfs under qemu-user emulation,
# which took most of an 18-minute root file system build; the cloud kernel unpacked on the host
# with a busybox initramfs packed here costs about a second. So the kernel stays outside the image.
#
# Slow parts are cached under ${NPU_AGENT_IMAGE_CACHE:-~/.cache/npu-agent-image}, keyed by what
# built them: the root file system tarball by its package list and suite, the kernel and busybox
# by their Debian package versions. A second run costs only the install and the partitions.
#
# Needs root (chroot, mkfs of files owned by root), mmdebstrap, qemu-user-static (it registers
# qemu-aarch64 with binfmt_misc itself when the kernel does not run arm64 binaries yet),
# e2fsprogs, dosfstools, mtools, cpio, device-tree-compiler, qemu-system-arm.
set -euo pipefail

SUITE=bookworm
# What the root file system holds beyond apt's variant: systemd as PID 1 and udev (device units
# for the fstab mounts). Change it and the cache key changes.
PACKAGES=systemd,systemd-sysv,udev
MODULES="virtio_ring virtio virtio_mmio virtio_blk failover net_failover virtio_net fat vfat nls_cp437 nls_ascii"

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  echo "options: --deb DEB (required) --board rock5b|pi5 (default rock5b) --serial S OUT"
  exit "${1:-2}"
}

deb="" board=rock5b serial=""
while [ $# -gt 0 ]; do
  case $1 in
    --deb) deb=$2; shift 2 ;;
    --board) board=$2; shift 2 ;;
    --serial) serial=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) usage ;;
    *) out=$1; shift ;;
  esac
done
[ -n "${out:-}" ] && [ -n "$deb" ] || usage
[ -f "$deb" ] || { echo "no package at $deb" >&2; exit 1; }
case $board in
  rock5b) model="Radxa ROCK 5B"; compatible='"radxa,rock-5b", "rockchip,rk3588"'
          serial=${serial:-5b0000000000000a} ;;
  pi5) model="Raspberry Pi 5 Model B Rev 1.0"; compatible='"raspberrypi,5-model-b", "brcm,bcm2712"'
       serial=${serial:-10000000a5a5a5a5} ;;
  *) usage ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
deb=$(realpath "$deb")
mkdir -p "$out"
out=$(realpath "$out")
cache=${NPU_AGENT_IMAGE_CACHE:-$HOME/.cache/npu-agent-image}
mkdir -p "$cache"
t_start=$(date +%s.%N)
say() { echo "build-test-image: $*" >&2; }
since() { echo "$(date +%s.%N) $1" | awk '{printf "%.1f", $1 - $2}'; }

for t in mmdebstrap mkfs.ext4 mkfs.vfat mcopy cpio dtc qemu-system-aarch64 dpkg-deb apt-get; do
  command -v "$t" >/dev/null || { say "$t not found (see the head of this script)"; exit 1; }
done

# ---- qemu-user through binfmt_misc: the chroot runs arm64 programs ----
binfmt() {
  if [ "$(uname -m)" = aarch64 ]; then return; fi
  if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  fi
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    conf=/usr/lib/binfmt.d/qemu-aarch64.conf
    [ -f "$conf" ] || { say "$conf missing: apt-get install qemu-user-static"; exit 1; }
    grep -v '^#' "$conf" | grep . > /proc/sys/fs/binfmt_misc/register
    say "registered qemu-aarch64 with binfmt_misc"
  fi
}
binfmt

# ---- the root file system (cached by suite + package list + this recipe's version) ----
recipe=2
key=$(printf '%s %s %s %s' "$SUITE" "$PACKAGES" "$recipe" "$(dpkg-query -W -f='${Version}' mmdebstrap)" |
  sha256sum | cut -c1-16)
rootfs_tar=$cache/rootfs-$SUITE-arm64-$key.tar
if [ ! -s "$rootfs_tar" ]; then
  say "building the root file system (mmdebstrap $SUITE arm64: $PACKAGES) into $rootfs_tar"
  t0=$(date +%s.%N)
  mmdebstrap --quiet --arch=arm64 --variant=apt --include="$PACKAGES" \
    "$SUITE" "$rootfs_tar.tmp"
  mv "$rootfs_tar.tmp" "$rootfs_tar"
  echo "rootfs_build_s=$(since "$t0")" > "$rootfs_tar.time"
  say "root file system built in $(since "$t0") s"
fi
