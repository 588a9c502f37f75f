#!/usr/bin/env bash
# Benchmark of the main job: wall time and instruction count of one full `npu-agent check`
# (release build) on a fixture tree and on this host, beside the same figures for the original
# four-check doctor script (SEED_DOCTOR=path, when given). Prints figures; asserts nothing.
#
#   bash bench/check.sh [RUNS]        (default 50 runs per target)
#
# Wall time: median and p90 over RUNS runs (each a fresh process, as a user or a timer runs it).
# Instructions: valgrind --tool=callgrind (counts instructions, repeatable), children included,
# or `perf stat -e instructions` where the machine supports it; "n/a" when neither is there.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-50}
SEED=${SEED_DOCTOR:-}
FIXTURE=tests/fixtures/boards/own-pi5-hailo10h-5.1.1-healthy/root

cargo build --release --quiet
BIN="${CARGO_TARGET_DIR:-target}/release/npu-agent"

wall_ms() { # command... -> "median p90" in ms over $RUNS runs
  local i t0 t1 times=()
  for ((i = 0; i < RUNS; i++)); do
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1 || true
    t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.2f %.2f", a[int((NR+1)/2)]/1000, a[int(NR*0.9)]/1000}'
}

instructions() { # command... -> instruction count
  if command -v valgrind >/dev/null 2>&1; then
    local dir
    dir=$(mktemp -d)
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$dir/cg.%p" "$@" >/dev/null 2>&1 || true
    # Sum the totals of every process (the script forks grep, cat, ...).
    cat "$dir"/cg.* 2>/dev/null | awk '/^summary:/ {s += $2} END {if (s) printf "%d", s; else printf "n/a"}'
    rm -rf "$dir"
  elif perf stat -e instructions true >/dev/null 2>&1; then
    perf stat -x, -e instructions "$@" 2>&1 >/dev/null | awk -F, '/instructions/ {printf "%d", $1}'
  else
    printf 'n/a'
  fi
}

row() { # label command...
  local label=$1
  shift
  read -r med p90 <<<"$(wall_ms "$@")"
  printf '%-44s %10s %10s %16s\n' "$label" "$med" "$p90" "$(instructions "$@")"
}

echo "npu-agent check benchmark: $RUNS runs per row; $(date -u +%Y-%m-%dT%H:%MZ); $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "binary: $BIN ($(stat -c %s "$BIN") bytes)"
printf '%-44s %10s %10s %16s\n' "target" "median_ms" "p90_ms" "instructions"
row "baseline: /bin/true (fork + exec only)" /bin/true
row "npu-agent check --root <pi5-hailo10h fixture>" "$BIN" check --root "$FIXTURE" --format json
row "npu-agent check (this host)" "$BIN" check --format json
# The static musl build is what boards run; it starts without the dynamic loader. Built when
# the x86_64 musl target is installed (rustup target add x86_64-unknown-linux-musl).
if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  cargo build --release --quiet --target x86_64-unknown-linux-musl
  STATIC="${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-musl/release/npu-agent"
  row "static musl: check --root <fixture>" "$STATIC" check --root "$FIXTURE" --format json
  row "static musl: check (this host)" "$STATIC" check --format json
fi
if [ -n "$SEED" ] && [ -f "$SEED" ]; then
  row "seed-doctor.sh (this host, 4 checks)" bash "$SEED"
else
  echo "seed-doctor.sh: not compared (set SEED_DOCTOR=path to the script)"
fi
