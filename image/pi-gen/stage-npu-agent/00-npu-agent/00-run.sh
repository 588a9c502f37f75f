#!/bin/bash -e
# On the build host, in this directory: copy the package and the installer into the image's /tmp
# (01-run-chroot.sh runs them inside the image). files/ holds:
#   npu-agent_<version>-1_arm64.deb   (packaging/build-debs.sh)
#   install-into-image.sh             (image/install-into-image.sh)
# and, for the operator's own apt repository (NPU_REPO_URL and NPU_REPO_KEY in the chroot's
# environment, docs/image-guide.md), add-apt-repo.sh (image/add-apt-repo.sh) and the key.
deb=$(find files -maxdepth 1 -name 'npu-agent_*_arm64.deb' | sort -V | tail -n 1)
if [ -z "${deb}" ]; then
	echo "npu-agent: no npu-agent_*_arm64.deb in $(pwd)/files" >&2
	exit 1
fi
install -m 644 "${deb}" "${ROOTFS_DIR}/tmp/npu-agent.deb"
install -m 644 files/install-into-image.sh "${ROOTFS_DIR}/tmp/npu-agent-install-into-image.sh"
if [ -f files/add-apt-repo.sh ]; then
	install -m 644 files/add-apt-repo.sh "${ROOTFS_DIR}/tmp/npu-agent-add-apt-repo.sh"
fi
