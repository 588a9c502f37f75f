#!/usr/bin/env bash
# CI entry point: install what the tests need on a fresh Debian 12 machine, then run the README's
# test command. Runs as root with CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-true}"
ci_start=$(date +%s)

# Rust toolchain (the machine image has rustup; a login shell may not have it on PATH).
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
cargo --version

# System packages the tests use: qemu (virtual boards, and qemu-aarch64-static for the aarch64
# build), dtc, e2fsprogs, cpio, mosquitto + clients (the tests start their own broker on a free
# loopback port: no service here), netcat-openbsd (relays a guest's broker connections), the
# aarch64 C cross compiler and its libc headers (crates with C parts, ring), file.
# arm64 package lists let the virtual-board tests `apt-get download` the guest kernel and busybox.
export DEBIAN_FRONTEND=noninteractive
dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  qemu-system-arm qemu-user-static device-tree-compiler e2fsprogs cpio gzip \
  mosquitto mosquitto-clients netcat-openbsd openssl \
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross file >/dev/null
# Brokers that speak only MQTT 3.1.1, which tests/system/interop.rs starts on free loopback ports:
# RabbitMQ 3.10 with its MQTT plugin (Debian 12 `rabbitmq-server`; no service is started here —
# a temporary policy-rc.d keeps the package from starting rabbitmq-server or epmd on all
# interfaces) and amqtt from PyPI in a venv cached under ~/.cache (a few seconds once cached).
if ! dpkg -s rabbitmq-server >/dev/null 2>&1; then
  added_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  apt-get install -y -qq --no-install-recommends rabbitmq-server >/dev/null
  if [ -n "$added_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi
apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
CI_CACHE="$HOME/.cache/npu-agent-ci"
if [ ! -x "$CI_CACHE/amqtt-venv/bin/amqtt" ]; then
  python3 -m venv "$CI_CACHE/amqtt-venv"
  "$CI_CACHE/amqtt-venv/bin/pip" install -q "amqtt==0.12.1"
fi
# Home Assistant itself (its MQTT discovery schemas validate the agent's discovery payloads in
# tests/ha_schema.py, which tests/system/interop.rs runs): a cached venv made by .ci/ha-venv.sh with uv
# (under a minute on the first run only).
if [ ! -x "$CI_CACHE/ha-venv/bin/hass" ]; then
  bash .ci/ha-venv.sh "$CI_CACHE/ha-venv"
fi

# Packaging (tests/system/package.rs): dpkg-dev and cargo-deb build the .debs, lintian lints them,
# systemd-analyze reviews the unit (its verify runs `man` for Documentation=: man-db),
# and the shellcheck tool lints the maintainer and image scripts.
apt-get install -y -qq --no-install-recommends dpkg-dev lintian systemd man-db shellcheck >/dev/null
# The arm64 Debian image (image/build-test-image.sh, tests/system/image.rs): mmdebstrap and arch-test
# build its root file system through qemu-user (the script registers binfmt_misc itself),
# dosfstools and mtools make the Pi's FAT boot partition without mounting it.
apt-get install -y -qq --no-install-recommends mmdebstrap arch-test dosfstools mtools >/dev/null
# The journal as an evidence source (tests/fast/journal.rs, tests/fast/capture.rs): systemd-journal-remote
# writes real journal files into a test directory, which journalctl -D reads.
apt-get install -y -qq --no-install-recommends systemd-journal-remote >/dev/null
command -v cargo-deb >/dev/null 2>&1 || cargo install cargo-deb --locked --version 3.8.0
# The Prometheus project's parser for the text exposition format (tests/fast/prometheus.rs reads
# `check --format prometheus` back with it), and Jinja2, the engine of Home Assistant's templates
# (tests/fast/ha_sensors.rs renders the discovery templates): from PyPI, else Debian's packages.
if ! python3 -c 'import prometheus_client.parser, jinja2' >/dev/null 2>&1; then
  python3 -m pip install -q --disable-pip-version-check 'prometheus_client==0.26.0' 'Jinja2==3.1.6' >/dev/null 2>&1 ||
    apt-get install -y -qq --no-install-recommends python3-prometheus-client python3-jinja2 >/dev/null
fi
# promtool (`promtool check metrics`, the same tests): unpacked from Debian's prometheus package
# without installing it, so no Prometheus server is set up or started on this machine.
promdir="$HOME/.cache/npu-agent/prometheus"
if ! command -v promtool >/dev/null 2>&1 && [ ! -x "$promdir/usr/bin/promtool" ]; then
  rm -rf "$promdir" && mkdir -p "$promdir"
  (cd "$promdir" && apt-get download -qq prometheus >/dev/null 2>&1 && dpkg-deb -x prometheus_*.deb . && rm -f prometheus_*.deb)
  [ -x "$promdir/usr/bin/promtool" ] || { echo ".ci/run: could not unpack promtool" >&2; exit 1; }
fi

# tests/system/operator.rs runs an independent command signer in Python (tests/operator/send_command.py):
# python-cryptography and paho-mqtt from PyPI (pip's cache keeps re-runs quick).
if ! python3 -c 'import cryptography, paho.mqtt' 2>/dev/null; then
  python3 -m pip --version >/dev/null 2>&1 \
    || apt-get install -y -qq --no-install-recommends python3 python3-pip >/dev/null
  pip_install="python3 -m pip install -q --disable-pip-version-check cryptography paho-mqtt"
  $pip_install 2>/dev/null || $pip_install --break-system-packages
fi

# The static aarch64 agent, which tests/system/aarch64.rs and tests/system/vboard.rs run (they rebuild it if
# it is stale; building it here keeps that out of the test timings and shows its size).
rustup target add aarch64-unknown-linux-musl
bash tests/vboard/build-aarch64.sh
# tests/system/aarch64.rs also runs a panic in the same build configuration (examples/panic_probe.rs).
cargo build --release --locked --no-default-features --target aarch64-unknown-linux-musl --example panic_probe

# The Debian packages tests/system/package.rs checks, lints and installs (arm64 from that static build,
# amd64 from a release build), with lintian's findings and the unit's security review printed.
bash packaging/build-debs.sh

# The arm64 Debian root file system tests/system/image.rs builds its images from: mmdebstrap through
# qemu-user, about 8 minutes on a fresh 2-core machine, then cached in ~/.cache/npu-agent-image
# (keyed by its package list); built here so its time shows and stays out of the test timings.
time bash image/build-test-image.sh --rootfs-only

