#!/bin/bash
# Armbian build framework hook: userpatches/customize-image.sh, run by ./compile.sh inside the
# image's chroot as: customize-image.sh RELEASE LINUXFAMILY BOARD BUILD_DESKTOP ARCH.
# Files in userpatches/overlay/ are visible there as /tmp/overlay/. Put these two there:
#   userpatches/overlay/npu-agent_<version>-1_arm64.deb      (packaging/build-debs.sh)
#   userpatches/overlay/npu-agent-install-into-image.sh      (image/install-into-image.sh)
# If you have a customize-image.sh already, add install_npu_agent and its call to it.

RELEASE=$1
LINUXFAMILY=$2
BOARD=$3
BUILD_DESKTOP=$4
ARCH=$5

install_npu_agent() {
	local deb
	# The newest package for the image's architecture.
	deb=$(find /tmp/overlay -maxdepth 1 -name "npu-agent_*_${ARCH}.deb" | sort -V | tail -n 1)
	if [ -z "$deb" ]; then
		echo "npu-agent: no npu-agent_*_${ARCH}.deb in userpatches/overlay/" >&2
		return 1
	fi
	echo "npu-agent: installing $deb for ${BOARD} (${LINUXFAMILY}, ${RELEASE}, desktop=${BUILD_DESKTOP})"
	# Armbian boots from /boot (armbianEnv.txt is there): the template goes beside it.
	sh /tmp/overlay/npu-agent-install-into-image.sh "$deb" /boot
}

install_npu_agent || exit 1
