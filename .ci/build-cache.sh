#!/usr/bin/env bash
# Sourced by the build scripts (tests/vboard/build-aarch64.sh, packaging/build-debs.sh, .ci/run):
#   cached_build ARTIFACT CARGO_BUILD_ARGS...
# runs `cargo build CARGO_BUILD_ARGS...` (which writes the file ARTIFACT) unless the directory
# $NPUAGENT_CI_BUILD_CACHE holds ARTIFACT from a build with the same inputs, which it then copies
# into place. The inputs (the key): every file cargo compiles into a binary (Cargo.toml,
# Cargo.lock, .cargo/, agent/, board-profiles/, catalog/, examples/), the toolchain (rustc -vV,
# cargo -V), RUSTFLAGS, the arguments and ARTIFACT's path below the target directory (its name in
# the cache). .ci/run sets
# the variable (~/.cache/npu-agent-ci/builds): the release builds with LTO are most of a warm run's
# build time and their inputs rarely change between runs. Unset (a developer's build), it only
# builds. Keeps the newest 3 files per artifact.
cached_build() {
  local artifact=$1
  shift
  if [ -z "${NPUAGENT_CI_BUILD_CACHE:-}" ]; then
    cargo build "$@" >&2
    return
  fi
  local target_dir=${CARGO_TARGET_DIR:-target} key name cached start inputs=() path
  for path in Cargo.toml Cargo.lock .cargo agent board-profiles catalog examples; do
    if [ -e "$path" ]; then inputs+=("$path"); fi
  done
  # The artifact's path below the target directory, e.g. aarch64-unknown-linux-musl_release_npu-agent.
  name=${artifact#"$target_dir"/}
  name=${name//\//_}
  key=$({
    rustc -vV
    cargo -V
    printf '%s\n' "RUSTFLAGS=${RUSTFLAGS:-}" "$name" "$@"
    find "${inputs[@]}" -type f -print0 \
      | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-32)
  cached="$NPUAGENT_CI_BUILD_CACHE/$name-$key"
  if [ -f "$cached" ]; then
    mkdir -p "$(dirname "$artifact")"
    cp "$cached" "$artifact.cache-tmp" && mv "$artifact.cache-tmp" "$artifact"
    echo "build-cache: $artifact from $cached (same inputs; cargo build $* not run)" >&2
    return
  fi
  start=$(date +%s)
  cargo build "$@" >&2
  [ -f "$artifact" ] || { echo "build-cache: cargo build $* wrote no $artifact" >&2; return 1; }
  mkdir -p "$NPUAGENT_CI_BUILD_CACHE"
  cp "$artifact" "$cached.tmp.$$" && mv "$cached.tmp.$$" "$cached"
  echo "build-cache: built $artifact in $(( $(date +%s) - start )) s, kept as $cached" >&2
  # shellcheck disable=SC2012 # names are ours: <artifact path with _>-<hex key>
  ls -t "$NPUAGENT_CI_BUILD_CACHE/$name"-* 2>/dev/null | tail -n +4 | xargs -r rm -f
}
