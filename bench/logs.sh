#!/usr/bin/env bash
# Per-cycle cost of the log evidence sources (a 16 MiB kernel log file, a journal of 100,000
# entries): one-shot check, daemon first cycle, nothing new, 100 new lines. Prints figures;
# asserts nothing. Needs systemd-journal-remote (Debian: apt-get install systemd-journal-remote).
#
#   bash bench/logs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --quiet --bench logs
