#!/bin/bash -e
# Inside the image (pi-gen's chroot, no systemd running): install, enable the unit, put the
# provisioning template on the boot partition (/boot/firmware: "bootfs" on a PC).
sh /tmp/npu-agent-install-into-image.sh /tmp/npu-agent.deb /boot/firmware
rm -f /tmp/npu-agent.deb /tmp/npu-agent-install-into-image.sh /tmp/npu-agent-add-apt-repo.sh
