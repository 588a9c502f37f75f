#!/bin/sh
# Installs npu-agent into a board image being built and puts the provisioning template on its
# boot partition. Runs inside the image's chroot (no systemd running there):
#   sh install-into-image.sh DEB BOOT_DIR
#   DEB       npu-agent_<version>-1_arm64.deb (packaging/build-debs.sh)
#   BOOT_DIR  /boot/firmware on Raspberry Pi OS, /boot on Armbian
# With NPU_REPO_URL and NPU_REPO_KEY set it also adds the operator's apt repository (below).
# Called by image/armbian/userpatches/customize-image.sh and image/pi-gen/stage-npu-agent/;
# tests/system/package.rs runs it on the CI machine (no systemd there either).
set -eu
deb=${1:?usage: install-into-image.sh DEB BOOT_DIR}
boot=${2:?usage: install-into-image.sh DEB BOOT_DIR}
say() { echo "npu-agent image: $*" >&2; }

[ -f "$deb" ] || { say "no package at $deb"; exit 1; }
[ -d "$boot" ] || { say "no boot directory $boot"; exit 1; }
# A provisioning file baked into an image would configure every board flashed from it alike.
if [ -e "$boot/npu-agent.toml" ]; then
  say "$boot/npu-agent.toml is in the image; remove it (each board gets its own after flashing)"
  exit 1
fi

# The postinst enables npu-agent.service; it starts it only where systemd runs, so here the unit
# is only enabled and starts on the board's first boot.
DEBIAN_FRONTEND=noninteractive dpkg -i "$deb"
if [ ! -L /etc/systemd/system/multi-user.target.wants/npu-agent.service ]; then
  say "npu-agent.service was not enabled"
  exit 1
fi

# The operator's signed apt repository (packaging/apt-repo/publish.sh), when the image build names
# one: NPU_REPO_URL, NPU_REPO_KEY (its npu-agent-archive-keyring.asc, a path inside the image) and
# optionally NPU_REPO_SUITE. add-apt-repo.sh comes beside this script (the hooks copy it as
# npu-agent-add-apt-repo.sh).
if [ -n "${NPU_REPO_URL:-}" ]; then
  here=$(dirname "$0")
  add="$here/add-apt-repo.sh"
  [ -f "$add" ] || add="$here/npu-agent-add-apt-repo.sh"
  [ -f "$add" ] || { say "NPU_REPO_URL is set but add-apt-repo.sh is not beside $0"; exit 1; }
  sh "$add" / "$NPU_REPO_URL" "${NPU_REPO_KEY:?NPU_REPO_KEY: the repository key (.asc) in the image}" \
    "${NPU_REPO_SUITE:-bookworm}"
fi

# The commented template beside the boot files: on a PC, copy it to npu-agent.toml and edit.
install -m 0644 /usr/share/npu-agent/npu-agent.toml.example "$boot/npu-agent.toml.example"
say "installed npu-agent $(dpkg-query -W -f='${Version}' npu-agent), npu-agent.service enabled, template $boot/npu-agent.toml.example"
