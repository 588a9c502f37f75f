#!/bin/sh
# Adds the operator's signed npu-agent apt repository (packaging/apt-repo/publish.sh) to a board
# image's sources, so `apt-get install npu-agent` and later upgrades come from it:
#   sh add-apt-repo.sh ROOT URL KEYRING [SUITE]
#   ROOT     the image's root (/ inside its chroot)
#   URL      the repository (https://…, or file:/… for a test)
#   KEYRING  its public key, ASCII-armoured (the repository's npu-agent-archive-keyring.asc)
#   SUITE    default bookworm
# Writes a deb822 source, ROOT/etc/apt/sources.list.d/npu-agent.sources, with the key inline in
# its Signed-By (apt 2.3.10 or newer: Debian 12, Ubuntu 22.04): the key is trusted for this
# repository only, not for the board's other sources, and no keyring file can go stale beside it.
# install-into-image.sh runs it when NPU_REPO_URL and NPU_REPO_KEY are set (docs/image-guide.md).
set -eu
root=${1:?usage: add-apt-repo.sh ROOT URL KEYRING [SUITE]}
url=${2:?usage: add-apt-repo.sh ROOT URL KEYRING [SUITE]}
keyring=${3:?usage: add-apt-repo.sh ROOT URL KEYRING [SUITE]}
suite=${4:-bookworm}
say() { echo "npu-agent image: $*" >&2; }
case "$url" in
  https://*|file:/*) ;;
  http://*) say "$url: plain http; the signature still protects the packages, but prefer https" ;;
  *) say "$url: not an https:// or file:/ URL"; exit 1 ;;
esac
[ -s "$keyring" ] || { say "no key at $keyring"; exit 1; }
if ! grep -q -- '^-----BEGIN PGP PUBLIC KEY BLOCK-----$' "$keyring" ||
  ! grep -q -- '^-----END PGP PUBLIC KEY BLOCK-----$' "$keyring"; then
  say "$keyring is not an ASCII-armoured public key (gpg --armor --export, or publish.sh's .asc)"
  exit 1
fi
dir="$root/etc/apt/sources.list.d"
mkdir -p "$dir"
{
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By:\n' "$url" "$suite"
  # deb822 continuation lines: each key line indented, an empty line as " .".
  sed -e 's/^$/./' -e 's/^/ /' "$keyring"
} > "$dir/npu-agent.sources.tmp"
chmod 0644 "$dir/npu-agent.sources.tmp"
mv "$dir/npu-agent.sources.tmp" "$dir/npu-agent.sources"
say "apt source $url ($suite) added, signed by the key in its Signed-By"
