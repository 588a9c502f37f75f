#!/usr/bin/env bash
# `check --root` on a board with 50 containers and 1 GB of container logs: time and bytes read.
# Prints figures; asserts nothing.
#
#   bash bench/workloads.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --quiet --bench workloads
