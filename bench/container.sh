#!/usr/bin/env bash
# Which checks degrade in a container, check by check: every board tree in
# tests/fixtures/boards/*/root is checked as a whole (what `check --root` sees on the host, and
# what the image sees with the host's / mounted at /host) and through two container views, trees
# holding only the parts a container is given:
#   mounts  the image with the issue's mounts only: /proc, /sys, /dev, the journal and the
#           container logs (/var/lib/docker/containers, /mnt/data/docker/containers,
#           /var/lib/containers, /var/log/pods)
#   add-on  the Home Assistant add-on (packaging/ha-addon/npu-agent/config.yaml): the host's /proc
#           (host_pid), /sys, /dev, the journal (journald), /lib/modules (kernel_modules); the
#           device tree is /proc/device-tree's (devicetree)
# tests/system/container.rs proves the image's verdicts equal `check --root`'s on the same tree, so
# the host binary stands in for the container here. Prints a Markdown table (docs/image-guide.md
# has it): per check, the trees where its status differs from the whole tree's, and how.
#   bash bench/container.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --locked
bin="${CARGO_TARGET_DIR:-target}/debug/npu-agent"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mounts_parts="proc sys dev var/log/journal var/lib/docker/containers mnt/data/docker/containers var/lib/containers var/log/pods"
addon_parts="proc sys dev var/log/journal lib/modules usr/lib/modules"

# view NAME TREE PARTS...: a tree holding only PARTS of TREE.
view() {
  local out="$work/$1" tree=$2 p
  shift 2
  rm -rf "$out" && mkdir -p "$out"
  for p in "$@"; do
    if [ -e "$tree/$p" ]; then
      mkdir -p "$out/$(dirname "$p")"
      cp -a "$tree/$p" "$out/$p"
    fi
  done
  echo "$out"
}

n=0
for tree in tests/fixtures/boards/*/root; do
  case_name=$(basename "$(dirname "$tree")")
  # shellcheck disable=SC2086
  for v in whole mounts addon; do
    case $v in
      whole) root=$tree ;;
      mounts) root=$(view mounts "$tree" $mounts_parts) ;;
      addon) root=$(view addon "$tree" $addon_parts) ;;
    esac
    "$bin" check --format json --root "$root" > "$work/$case_name.$v.json" 2>/dev/null || true
  done
  n=$((n + 1))
done
echo "bench/container.sh: $n board trees" >&2
python3 - "$work" <<'PY'
import collections, glob, json, os, sys
work = sys.argv[1]
def statuses(path):
    try:
        r = json.load(open(path))
    except Exception:
        return None
    return {f["id"]: f["status"] for f in r.get("findings", [])}
seen = collections.Counter()
diff = {v: collections.defaultdict(collections.Counter) for v in ("mounts", "addon")}
cases = sorted({os.path.basename(p).rsplit(".", 2)[0] for p in glob.glob(f"{work}/*.json")})
for case in cases:
    whole = statuses(f"{work}/{case}.whole.json") or {}
    for cid in whole:
        seen[cid] += 1
    for v in diff:
        other = statuses(f"{work}/{case}.{v}.json") or {}
        for cid, st in whole.items():
            o = other.get(cid, "absent")
            if o != st:
                diff[v][cid][f"{st}→{o}"] += 1
def cell(c):
    if not c:
        return "same"
    return ", ".join(f"{k} ×{n}" for k, n in sorted(c.items()))
print("| check | trees | image, mounts only | add-on |")
print("|---|---|---|---|")
for cid in sorted(seen):
    print(f"| `{cid}` | {seen[cid]} | {cell(diff['mounts'][cid])} | {cell(diff['addon'][cid])} |")
same = {v: sum(1 for c in seen if not diff[v][c]) for v in diff}
print(f"\n{len(cases)} trees, {len(seen)} checks; unchanged in every tree: mounts only {same['mounts']}, add-on {same['addon']}")
PY
