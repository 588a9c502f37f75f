#!/bin/sh
# Prints what this machine's own npu-agent installation looks like: every file, directory and
# link under its paths (type, mode, owner, size, mtime, link target, sha256 of contents), the unit
# links under /etc/systemd/system and the package's dpkg status. .ci/run saves it before the
# suite; tests/host.rs prints it again and asserts nothing changed. Reads only.
set -u
for p in /etc/npu-agent /var/lib/npu-agent /etc/default/npu-agent /usr/bin/npu-agent \
  /usr/lib/systemd/system/npu-agent.service /lib/systemd/system/npu-agent.service \
  /etc/systemd/system/npu-agent.service /etc/systemd/system/npu-agent.service.d \
  /usr/share/doc/npu-agent /usr/share/npu-agent; do
  if [ -e "$p" ] || [ -L "$p" ]; then
    find "$p" -printf '%y %m %u:%g %s %T@ %p -> %l\n' | sort
    find "$p" -type f -exec sha256sum {} + | sort -k2
  else
    echo "absent $p"
  fi
done
find /etc/systemd/system -name 'npu-agent*' -printf 'unit link %p -> %l\n' 2>/dev/null | sort
printf 'dpkg status: %s\n' "$(dpkg-query -W -f='${Status} ${Version}' npu-agent 2>/dev/null || echo not installed)"
