#!/bin/bash -e
# On the build host, in this directory: copy the package and the installer into the image's /tmp
# (01-run-chroot.sh runs them inside the image). files/ holds:
#   npu-agent_<version>-1_arm64.deb   (packaging/build-debs.sh)
#   install-into-image.sh             (image/install-into-image.sh)
deb=$(find files -maxdepth 1 -name 'npu-agent_*_arm64.deb' | sort -V | tail -n 1)
if [ -z "${deb}" ]; then
	echo "npu-agent: no npu-agent_*_arm64.deb in $(pwd)/files" >&2
	exit 1
fi
install -m 644 "${deb}" "${ROOTFS_DIR}/tmp/npu-agent.deb"
install -m 644 files/install-into-image.sh "${ROOTFS_DIR}/tmp/npu-agent-install-into-image.sh"
