#!/usr/bin/env bash
# Where the bytes of the static aarch64 agent go:
#   bash bench/size.sh [N]
# Builds the shipped binary (tests/vboard/build-aarch64.sh: release profile, stripped) and prints
# its size against the ceiling of tests/system/aarch64.rs, its ELF sections, its symbols
# grouped by what they belong to, and the N (default 25) largest crates and functions of the same code built with its symbols kept
# (profile `release-symbols`). Crate figures come from `cargo bloat` (cargo install cargo-bloat)
# when it is installed, else from the symbol table (`nm --size-sort`, functions only).
# Honours CARGO_TARGET_DIR. Prints the date, the machine and the toolchain first.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-25}"
target=aarch64-unknown-linux-musl
limit=4000000     # tests/system/aarch64.rs: aarch64_binary_fits_the_size_limit (SIZE_LIMIT_BYTES)
tdir="${CARGO_TARGET_DIR:-target}"

echo "date: $(date -u +%Y-%m-%dT%H:%MZ); machine: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //' || echo unknown cpu); $(rustc --version)"

bin=$(bash tests/vboard/build-aarch64.sh | tail -n 1)
size=$(stat -c %s "$bin")
echo "size: $size bytes stripped ($(( (size + 1023) / 1024 )) KiB); limit $limit bytes ($(( limit - size )) to spare)"

# What the two lld flags issue 36 took out would take off (docs/development.md, "Deviations"):
# the same build with them, in a target directory of its own.
flags="-C target-feature=+crt-static -C link-arg=--icf=all -C link-arg=--no-eh-frame-hdr"
CARGO_TARGET_DIR="$tdir/size-link-flags" CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="$flags" \
  cargo build --release --locked --no-default-features --target "$target" >&2
with=$(stat -c %s "$tdir/size-link-flags/$target/release/npu-agent")
echo "with lld's --icf=all and --no-eh-frame-hdr: $with bytes ($(( with - size )))"

echo "sections in the file (bytes):"
readelf -SW "$bin" | sed -n 's/^ *\[ *[0-9]*\] //p' | while read -r name type _addr _off hexsize _rest; do
  case "$name:$type" in
    .*:NOBITS | *:NULL) ;;
    .*) printf '  %-20s %8d\n' "$name" "$((16#$hexsize))" ;;
  esac
done | sort -k2 -nr

cargo build --locked --no-default-features --target "$target" --profile release-symbols >&2
sym="$tdir/$target/release-symbols/npu-agent"
# The same symbols grouped by what they belong to (first matching pattern of the demangled name;
# generic code instantiated for another crate's types goes to the first group it names), code
# and read-only data together. Approximate: string literals and other unnamed data are not
# symbols, so the groups add up to less than the sections. Aliases (one address) count once.
nm=$(command -v aarch64-linux-gnu-nm || command -v llvm-nm || command -v nm)
echo "grouped by name ($nm -C -S, code and read-only data symbols, bytes):"
"$nm" -C -S "$sym" | awk '
  function hex(h,   i, v) { v = 0; h = tolower(h); for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1; return v }
  NF >= 4 && $3 ~ /^[tTrRW]$/ && !seen[$1]++ {
    size = hex($2); name = $0; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", name)
    if (name ~ /^OUTLINED_FUNCTION/) g = "code the LLVM machine outliner shared out (all crates)"
    else if (name ~ /__rust_(begin|end)_short_backtrace/) g = "std, core, alloc (rest)"   # thread and main entry frames, not backtrace code
    else if (name ~ /backtrace|gimli|addr2line|libunwind|_Unwind|rustc_demangle/) g = "std backtrace printing, symbolizer, unwinder"
    else if (name ~ /clap/) g = "clap (the command line: clap_builder and the code its derive writes for agent/cli)"
    else if (name ~ /tracing_subscriber|sharded_slab|tracing_core|tracing::/) g = "tracing + tracing-subscriber"
    else if (name ~ /ed25519|curve25519|sha2::|pkcs8|der::|spki|base64ct|pem_rfc7468/) g = "curve25519-dalek + ed25519 key files"
    else if (name ~ /rustls|webpki/) g = "rustls + webpki"
    else if (name ~ /ring::|ring_core_|nistz256|k25519Precomp|vpaes|ChaCha20|[Pp]oly1305|^(ge|fe|x25519|sc|bn|p256|p384|gcm|aes|sha256|sha512|LIMBS|limbs)_/) g = "ring"
    else if (name ~ /toml/) g = "toml"
    else if (name ~ /rumqttc/) g = "rumqttc"
    else if (name ~ /tokio|mio::/) g = "tokio"
    else if (name ~ /serde_json/) g = "serde_json"
    else if (name ~ /regex_lite/) g = "regex-lite"
    else if (name ~ /miniz_oxide|flate2|tar::/) g = "flate2 + tar"
    else if (name ~ /npu_agent::/) g = "npu-agent (own code)"
    else if (name ~ /std::|core::|alloc::/) g = "std, core, alloc (rest)"
    else g = "other (musl libc, compiler builtins, ...)"
    sum[g] += size; total += size
  }
  END {
    for (g in sum) printf "  %8d  %s\n", sum[g], g
    printf "  %8d  all named code and read-only data\n", total
  }' | sort -nr

if cargo bloat --version >/dev/null 2>&1; then
  echo "largest crates (cargo bloat, .text only):"
  cargo bloat --locked --no-default-features --target "$target" --profile release-symbols --crates -n "$n" 2>/dev/null
  echo "largest functions:"
  cargo bloat --locked --no-default-features --target "$target" --profile release-symbols -n "$n" 2>/dev/null
else
  echo "largest functions ($nm --size-sort; cargo install cargo-bloat for per-crate figures):"
  "$nm" --size-sort -C -S "$sym" | grep -i ' t ' | tail -n "$n" | while read -r _addr hexsize _type name; do
    printf '  %8d  %s\n' "$((16#$hexsize))" "$name"
  done | sort -nr
fi
