#!/usr/bin/env bash
# Publishes npu-agent .debs in a signed apt repository with Debian's own tools (reprepro, gpg):
#   bash packaging/apt-repo/publish.sh --repo DIR --key KEY [--suite bookworm] DEB...
# --repo   the repository's directory (created; serve it over HTTPS, or as file: for a test)
# --key    the signing key (a gpg key id or fingerprint in $GNUPGHOME, no passphrase or an agent
#          that has it)
# --suite  the suite boards name in their sources (default bookworm); component main,
#          architectures arm64 and amd64
# Adding a version keeps the older ones in the pool (`reprepro includedeb` replaces the index
# entry; the pool keeps what another suite still lists). Writes DIR/npu-agent-archive-keyring.asc
# (the public key boards get, for image/add-apt-repo.sh). Prints DIR on the last line of stdout.
# Recipe and key handling: docs/image-guide.md "A signed apt repository".
set -euo pipefail
repo="" key="" suite=bookworm
while [ $# -gt 0 ]; do
  case "$1" in
    --repo) repo=$2; shift 2 ;;
    --key) key=$2; shift 2 ;;
    --suite) suite=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "publish: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ -z "$repo" ] || [ -z "$key" ] || [ $# -eq 0 ]; then
  echo "usage: publish.sh --repo DIR --key KEY [--suite SUITE] DEB..." >&2; exit 2
fi
for t in reprepro gpg; do
  command -v "$t" >/dev/null || { echo "publish: $t missing (apt-get install reprepro gnupg)" >&2; exit 1; }
done
gpg --batch --list-secret-keys "$key" >/dev/null 2>&1 || {
  echo "publish: no secret key $key in ${GNUPGHOME:-~/.gnupg}" >&2; exit 1; }
mkdir -p "$repo/conf"
repo=$(realpath "$repo")
# The repository's one distribution; rewritten each time so a changed key or suite applies.
cat > "$repo/conf/distributions" <<CONF
Origin: npu-agent
Label: npu-agent
Codename: $suite
Architectures: arm64 amd64
Components: main
Description: npu-agent packages
SignWith: $key
CONF
for deb in "$@"; do
  [ -f "$deb" ] || { echo "publish: no package at $deb" >&2; exit 1; }
  reprepro --basedir "$repo" includedeb "$suite" "$deb" >&2
done
# reprepro signs Release into Release.gpg and InRelease; check the signature before saying done.
reprepro --basedir "$repo" export "$suite" >&2
gpg --batch --verify "$repo/dists/$suite/InRelease" >/dev/null 2>&1 || {
  echo "publish: dists/$suite/InRelease does not verify" >&2; exit 1; }
gpg --batch --yes --armor --export "$key" > "$repo/npu-agent-archive-keyring.asc"
echo "publish: $repo ($suite): $(reprepro --basedir "$repo" list "$suite" | tr '\n' ';')" >&2
echo "$repo"
