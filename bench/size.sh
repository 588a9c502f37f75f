#!/usr/bin/env bash
# Where the bytes of the static aarch64 agent go:
#   bash bench/size.sh [N]
# Builds the shipped binary (tests/vboard/build-aarch64.sh: release profile, stripped) and prints
# its size against the size goal and ceiling of tests/aarch64.rs, its ELF sections, and
# the N (default 25) largest crates and functions of the same code built with its symbols kept
# (profile `release-symbols`). Crate figures come from `cargo bloat` (cargo install cargo-bloat)
# when it is installed, else from the symbol table (`nm --size-sort`, functions only).
# Honours CARGO_TARGET_DIR. Prints the date, the machine and the toolchain first.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-25}"
target=aarch64-unknown-linux-musl
goal=2300000      # tests/aarch64.rs: aarch64_binary_fits_the_size_goal (ignored until met)
ceiling=2640000   # tests/aarch64.rs: aarch64_binary_stays_under_the_size_ceiling
tdir="${CARGO_TARGET_DIR:-target}"

echo "date: $(date -u +%Y-%m-%dT%H:%MZ); machine: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //' || echo unknown cpu); $(rustc --version)"

bin=$(bash tests/vboard/build-aarch64.sh | tail -n 1)
size=$(stat -c %s "$bin")
echo "size: $size bytes stripped ($(( (size + 1023) / 1024 )) KiB); goal $goal bytes ($(( goal - size )) to spare), ceiling $ceiling bytes ($(( ceiling - size )) to spare)"

echo "sections in the file (bytes):"
readelf -SW "$bin" | sed -n 's/^ *\[ *[0-9]*\] //p' | while read -r name type _addr _off hexsize _rest; do
  case "$name:$type" in
    .*:NOBITS | *:NULL) ;;
    .*) printf '  %-20s %8d\n' "$name" "$((16#$hexsize))" ;;
  esac
done | sort -k2 -nr

cargo build --locked --target "$target" --profile release-symbols >&2
sym="$tdir/$target/release-symbols/npu-agent"
if cargo bloat --version >/dev/null 2>&1; then
  echo "largest crates (cargo bloat, .text only):"
  cargo bloat --locked --target "$target" --profile release-symbols --crates -n "$n" 2>/dev/null
  echo "largest functions:"
  cargo bloat --locked --target "$target" --profile release-symbols -n "$n" 2>/dev/null
else
  nm=$(command -v aarch64-linux-gnu-nm || command -v llvm-nm || command -v nm)
  echo "largest functions ($nm --size-sort; cargo install cargo-bloat for per-crate figures):"
  "$nm" --size-sort -C -S "$sym" | grep -i ' t ' | tail -n "$n" | while read -r _addr hexsize _type name; do
    printf '  %8d  %s\n' "$((16#$hexsize))" "$name"
  done | sort -nr
fi
