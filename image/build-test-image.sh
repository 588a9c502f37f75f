#!/bin/bash
# Builds a bootable arm64 Debian bookworm test image that holds npu-agent, the way a board image
# gets it: a root file system made by mmdebstrap, the .deb installed through install-into-image.sh
# (the entry point the Armbian and pi-gen hooks call) inside its chroot, and a separate boot
# partition. Used by tests/system/image.rs; usable by a person to try the agent under systemd:
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
# Kernel choice, measured with this script (it prints rootfs_build_s): with Debian's kernel and
# initramfs-tools inside the image (--kernel image) the kernel package and update-initramfs run
# under qemu-user emulation, and that root file system build took 3127 s on a loaded 2-core
# machine, where the one without a kernel took 449 s. The cloud kernel unpacked
# on the host with a busybox initramfs packed here costs about a second, so it is the default.
#
# Slow parts are cached under ${NPU_AGENT_IMAGE_CACHE:-~/.cache/npu-agent-image}, keyed by what
# built them: the root file system tarball by its package list and suite, the kernel and busybox
# by their Debian package versions. A second run costs only the install and the partitions.
#
# Needs root (chroot, mkfs of files owned by root), mmdebstrap, qemu-user-static (it registers
# qemu-aarch64 with binfmt_misc itself when the kernel does not run arm64 binaries yet),
# e2fsprogs, dosfstools, mtools, cpio, device-tree-compiler, qemu-system-arm, netcat-openbsd,
# and the arm64 package lists (dpkg --add-architecture arm64 && apt-get update).
set -euo pipefail

SUITE=bookworm
# What the root file system holds beyond apt's variant: systemd as PID 1 and udev (device units
# for the fstab mounts). Change it and the cache key changes.
PACKAGES=systemd,systemd-sysv,udev
MODULES="virtio_ring virtio virtio_mmio virtio_blk failover net_failover virtio_net fat vfat nls_cp437 nls_ascii"

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  echo "options: --deb DEB (required) --board rock5b|pi5 (default rock5b) --serial S"
  echo "         --file /DEST=SRC (into the root fs)  --boot-file NAME=SRC (onto the boot partition)"
  echo "         --rootfs-only (build or find the cached root file system tarball, print its path)"
  echo "         --kernel cloud|image (default cloud; image = Debian's kernel and initramfs-tools"
  echo "           inside the root file system, for measuring the other route)"
  echo "         OUT (output directory)"
  exit "${1:-2}"
}

deb="" board=rock5b serial="" rootfs_only="" kernel=cloud
root_files=() boot_files=()
while [ $# -gt 0 ]; do
  case $1 in
    --deb) deb=$2; shift 2 ;;
    --file) root_files+=("$2"); shift 2 ;;
    --boot-file) boot_files+=("$2"); shift 2 ;;
    --rootfs-only) rootfs_only=1; shift ;;
    --kernel) kernel=$2; shift 2 ;;
    --board) board=$2; shift 2 ;;
    --serial) serial=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) usage ;;
    *) out=$1; shift ;;
  esac
done
if [ -z "$rootfs_only" ]; then
  if [ -z "${out:-}" ] || [ -z "$deb" ]; then usage; fi
  [ -f "$deb" ] || { echo "no package at $deb" >&2; exit 1; }
  deb=$(realpath "$deb")
  mkdir -p "$out"
  out=$(realpath "$out")
fi
case $board in
  rock5b) model="Radxa ROCK 5B"; compatible='"radxa,rock-5b", "rockchip,rk3588"'
          serial=${serial:-5b0000000000000a} ;;
  pi5) model="Raspberry Pi 5 Model B Rev 1.0"; compatible='"raspberrypi,5-model-b", "brcm,bcm2712"'
       serial=${serial:-10000000a5a5a5a5} ;;
  *) usage ;;
esac
case $kernel in
  cloud) ;;
  image) PACKAGES=$PACKAGES,linux-image-cloud-arm64,initramfs-tools ;;
  *) usage ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
cache=${NPU_AGENT_IMAGE_CACHE:-$HOME/.cache/npu-agent-image}
mkdir -p "$cache"
t_start=$(date +%s.%N)
say() { echo "build-test-image: $*" >&2; }
since() { echo "$(date +%s.%N) $1" | awk '{printf "%.1f", $1 - $2}'; }

for t in mmdebstrap mkfs.ext4 mkfs.vfat mcopy cpio dtc qemu-system-aarch64 dpkg-deb apt-get nc; do
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
# One build at a time (tests run in parallel): a second caller waits and then finds it cached.
exec 9> "$cache/rootfs.lock"
flock 9
if [ ! -s "$rootfs_tar" ]; then
  say "building the root file system (mmdebstrap $SUITE arm64: $PACKAGES) into $rootfs_tar"
  t0=$(date +%s.%N)
  mmdebstrap --quiet --arch=arm64 --variant=apt --format=tar --include="$PACKAGES" \
    "$SUITE" "$rootfs_tar.tmp"
  mv "$rootfs_tar.tmp" "$rootfs_tar"
  echo "rootfs_build_s=$(since "$t0")" > "$rootfs_tar.time"
  say "root file system built in $(since "$t0") s"
fi
exec 9>&-
[ "${rootfs_only:-}" = 1 ] && { echo "$rootfs_tar"; exit 0; }

# ---- the kernel and busybox, from Debian's arm64 packages (cached by their versions) ----
show() { apt-cache show --no-all-versions "$1:arm64" 2>/dev/null | sed -n "s/^$2: //p" | head -1; }
kpkg=$(show linux-image-cloud-arm64 Depends | tr ',|' '\n' | sed -n 's/^ *\(linux-image-[^ ]*\).*/\1/p' | head -1)
if [ -z "$kpkg" ]; then
  say "no arm64 package lists: dpkg --add-architecture arm64 && apt-get update"
  exit 1
fi
kver=$(show "$kpkg" Version) bver=$(show busybox-static Version)
kdir=$cache/kernel-$kpkg-$kver-busybox-${bver//:/_}
if [ ! -f "$kdir/READY" ]; then
  say "fetching $kpkg $kver and busybox-static $bver"
  tmp=$(mktemp -d "$cache/kernel.XXXXXX")
  (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$kpkg:arm64" busybox-static:arm64 >/dev/null)
  for d in "$tmp"/*.deb; do dpkg -x "$d" "$tmp/x"; done
  mkdir -p "$tmp/k/modules"
  cp "$tmp"/x/boot/vmlinuz-* "$tmp/k/vmlinuz"
  cp "$tmp/x/bin/busybox" "$tmp/k/busybox"
  for m in $MODULES; do
    f=$(find "$tmp/x/lib/modules" -name "$m.ko" | head -1)
    # Absent means built in (CONFIG_..=y): nothing to load.
    [ -n "$f" ] && cp "$f" "$tmp/k/modules/" && echo "$m" >> "$tmp/k/modules/order"
  done
  echo "$kpkg $kver; busybox-static $bver" > "$tmp/k/READY"
  rm -rf "$kdir"; mv "$tmp/k" "$kdir"; rm -rf "$tmp"
fi

t_image=$(date +%s.%N)
work=$(mktemp -d "${TMPDIR:-/tmp}/npu-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root boot=$work/boot
mkdir -p "$root" "$boot"

# ---- the tiny initramfs: load virtio (+ vfat), find the root disk, switch_root to systemd ----
mkdir -p "$work/initrd/bin" "$work/initrd/lib" "$work/initrd/dev" "$work/initrd/proc" "$work/initrd/newroot"
cp "$kdir/busybox" "$work/initrd/bin/busybox"
cp "$kdir"/modules/*.ko "$kdir/modules/order" "$work/initrd/lib/"
cat > "$work/initrd/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t devtmpfs devtmpfs /dev
for m in $(cat /lib/order); do insmod "/lib/$m.ko"; done
# The root disk is the ext4 one that holds /sbin/init (the boot partition may be ext4 too).
i=0
while [ $i -lt 100 ]; do
  for d in /dev/vd?; do
    [ -b "$d" ] || continue
    if mount -t ext4 -o rw "$d" /newroot 2>/dev/null; then
      if [ -L /newroot/sbin/init ] || [ -e /newroot/sbin/init ]; then
        mount -o move /dev /newroot/dev
        umount /proc
        exec switch_root /newroot /sbin/init
      fi
      umount /newroot
    fi
  done
  sleep 0.1; i=$((i + 1))
done
echo "initramfs: no root disk with /sbin/init among $(ls /dev/vd* 2>/dev/null)"
poweroff -f
INIT
chmod 755 "$work/initrd/init"
if [ "$kernel" = cloud ]; then
  (cd "$work/initrd" && find . | cpio -o -H newc --quiet | gzip -1) > "$out/initrd.img"
  cp "$kdir/vmlinuz" "$out/vmlinuz"
fi

# ---- the root file system with the package installed through the image hooks' entry point ----
tar -xf "$rootfs_tar" -C "$root"
if [ "$kernel" = image ]; then
  # The kernel and the initramfs update-initramfs built inside the image (not on the boot
  # partition: the test's is small).
  cp "$root"/boot/vmlinuz-* "$out/vmlinuz"
  cp "$root"/boot/initrd.img-* "$out/initrd.img"
  rm -f "$root"/boot/vmlinuz* "$root"/boot/initrd.img* "$root"/boot/System.map-* "$root"/boot/config-*
fi
case $board in
  rock5b) bootdir=/boot label=npu-boot
          printf 'LABEL=%s /boot ext4 defaults 0 0\n' "$label" > "$work/fstab.boot" ;;
  pi5) bootdir=/boot/firmware label=NPUBOOT
       printf 'LABEL=%s /boot/firmware vfat defaults 0 0\n' "$label" > "$work/fstab.boot" ;;
esac
mkdir -p "$root$bootdir"
cp "$deb" "$root/tmp/npu-agent.deb"
cp "$here/install-into-image.sh" "$root/tmp/install-into-image.sh"
t0=$(date +%s.%N)
chroot "$root" sh /tmp/install-into-image.sh /tmp/npu-agent.deb "$bootdir"
say "install-into-image.sh in the arm64 chroot took $(since "$t0") s"
rm -f "$root/tmp/npu-agent.deb" "$root/tmp/install-into-image.sh"
# What install-into-image.sh put on the boot partition goes onto the boot partition image.
cp -a "$root$bootdir/." "$boot/"
find "$root$bootdir" -mindepth 1 -delete

# The board: hostname, fstab, a static address on the guest network (the host broker is
# 10.0.2.100 through qemu's forward), root logged in on the serial console for the test driver,
# no timers that would compete for the emulated CPU.
echo "$board-image" > "$root/etc/hostname"
{ echo "LABEL=npu-root / ext4 defaults 0 1"; cat "$work/fstab.boot"; } > "$root/etc/fstab"
mkdir -p "$root/etc/systemd/network"
printf '[Match]\nType=ether\n\n[Network]\nAddress=10.0.2.15/24\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n' \
  > "$root/etc/systemd/network/10-guest.network"
chroot "$root" systemctl enable --quiet systemd-networkd.service
chroot "$root" systemctl mask --quiet apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
  fstrim.timer systemd-networkd-wait-online.service 2>/dev/null || true
mkdir -p "$root/etc/systemd/system/serial-getty@ttyAMA0.service.d"
# shellcheck disable=SC2016 # $TERM is systemd's to expand
printf '[Service]\nExecStart=\nExecStart=-/sbin/agetty --autologin root --noclear --keep-baud %%I 115200 $TERM\n' \
  > "$root/etc/systemd/system/serial-getty@ttyAMA0.service.d/autologin.conf"
: > "$root/etc/machine-id"
# Files the caller adds: --file DEST=SRC (root file system), --boot-file NAME=SRC (boot partition).
for f in "${root_files[@]}"; do install -D -m 0644 "${f#*=}" "$root${f%%=*}"; done

# ---- the boot partition, built from a folder without mounting ----
case $board in
  rock5b) printf 'verbosity=1\nrootdev=LABEL=npu-root\nrootfstype=ext4\nextraargs=cma=128M\n' > "$boot/armbianEnv.txt" ;;
  pi5) printf '[all]\narm_64bit=1\ndtoverlay=vc4-kms-v3d\n' > "$boot/config.txt"
       printf 'console=serial0,115200 root=LABEL=npu-root rootfstype=ext4 rootwait\n' > "$boot/cmdline.txt" ;;
esac
for f in "${boot_files[@]}"; do install -m 0644 "${f#*=}" "$boot/${f%%=*}"; done
rm -f "$out/boot.img"
case $board in
  rock5b) mkfs.ext4 -q -L "$label" -d "$boot" "$out/boot.img" 32M ;;
  pi5) mkfs.vfat -n "$label" -C "$out/boot.img" 32768 >/dev/null
       for f in "$boot"/*; do mcopy -i "$out/boot.img" "$f" ::/; done ;;
esac
rm -f "$out/root.img"
mkfs.ext4 -q -L npu-root -d "$root" "$out/root.img" 1200M

# ---- the board's device tree: qemu's -M virt tree with the board's model, compatible, serial ----
mem=${NPU_AGENT_IMAGE_MEM_MB:-2048} smp=2
qemu-system-aarch64 -M "virt,dumpdtb=$work/virt.dtb" -cpu cortex-a72 -m "$mem" -smp "$smp" \
  -nodefaults -display none >/dev/null
dtc -q -I dtb -O dts "$work/virt.dtb" |
  sed -e "0,/model = .*/s//model = \"$model\";/" \
      -e "0,/compatible = \"linux,dummy-virt\";/s//compatible = $compatible;\n\tserial-number = \"$serial\";/" \
  > "$work/board.dts"
dtc -q -I dts -O dtb -o "$out/board.dtb" "$work/board.dts"

# ---- how to boot it ----
cat > "$out/boot.sh" <<BOOT
#!/bin/sh
# Boots this $board image under qemu-system-aarch64 (TCG, $smp cores, $mem MiB), serial console
# on stdio. The guest reaches a broker on the host's 127.0.0.1:\${BROKER_PORT:-1883} as
# 10.0.2.100:1883 and nothing else (restrict=on); each connection runs its own netcat-openbsd
# relay, so the broker may start late or restart. EXTRA_ARGS are appended to the kernel command
# line (the boot partition's extraargs= / cmdline.txt, as a board's bootloader would).
# A reboot in the guest makes qemu exit (-no-reboot): run this again to boot again.
here=\$(dirname "\$0")
exec qemu-system-aarch64 -M virt -cpu cortex-a72 -m $mem -smp $smp -nographic -no-reboot \\
  -nodefaults -serial stdio -dtb "\$here/board.dtb" \\
  -kernel "\$here/vmlinuz" -initrd "\$here/initrd.img" \\
  -drive file="\$here/root.img",format=raw,if=none,id=root -device virtio-blk-device,drive=root \\
  -drive file="\$here/boot.img",format=raw,if=none,id=boot -device virtio-blk-device,drive=boot \\
  -netdev user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:1883-cmd:"nc -N 127.0.0.1 \${BROKER_PORT:-1883}" \\
  -device virtio-net-device,netdev=n0 \\
  -append "console=ttyAMA0 root=LABEL=npu-root rw panic=-1 quiet loglevel=3 \${EXTRA_ARGS:-}"
BOOT
chmod 755 "$out/boot.sh"
echo "$(cat "$kdir/READY"); rootfs $(basename "$rootfs_tar")" > "$out/PACKAGES"
say "image in $out ($kernel kernel; install + partitions $(since "$t_image") s, whole run $(since "$t_start") s)"
echo "bench: image_build_s=$(since "$t_start") image_install_and_partitions_s=$(since "$t_image") $(cat "$rootfs_tar.time" 2>/dev/null)"
