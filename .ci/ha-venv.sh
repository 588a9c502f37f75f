#!/bin/bash
# Makes the Home Assistant venv tests/system/interop.rs validates the discovery payloads with:
# Home Assistant 2025.4 (Python 3.13) and its pinned dependencies from PyPI, installed by uv
# (fetched and unpacked in parallel: under a minute cold, where pip took about 20 minutes).
# Usage: .ci/ha-venv.sh DEST   (DEST must not hold a working venv; .ci/run passes its cache path)
# Prints the time it took. uv itself comes from PyPI, pinned, into DEST.uv; its download cache is
# a temporary directory removed afterwards (packages are copied into the venv, not linked).
set -euo pipefail
dest="$1"
start=$(date +%s)
if [ ! -x "$dest.uv/bin/uv" ]; then
  rm -rf "$dest.uv"
  python3 -m venv "$dest.uv"
  "$dest.uv/bin/pip" install -q --disable-pip-version-check "uv==0.13.9"
fi
# Home Assistant 2025.4 needs Python 3.13: python3.13 on PATH, or pyenv's 3.13 when the shim
# does not select it.
py=""
for c in python3.13 "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3.13*/bin/python3.13; do
  if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 13)' >/dev/null 2>&1; then
    py="$c"
    break
  fi
done
if [ -z "$py" ]; then
  echo "ha-venv.sh: Home Assistant 2025.4 needs Python 3.13, and no python3.13 runs here" >&2
  exit 1
fi
rm -rf "$dest"
"$py" -m venv "$dest"
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
UV_CACHE_DIR="$cache" "$dest.uv/bin/uv" pip install -q --link-mode=copy \
  --python "$dest/bin/python" "homeassistant==2025.4.*"
"$dest/bin/python" -c 'import homeassistant.components.mqtt.discovery' >/dev/null
rm -rf "$cache"
echo "Home Assistant venv $dest: $(( $(date +%s) - start )) s (uv download cache removed)"
