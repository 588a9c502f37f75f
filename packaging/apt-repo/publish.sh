#!/usr/bin/env bash
# Publishes npu-agent .debs in a signed apt repository with Debian's own tools (apt-ftparchive
# from apt-utils, gpg):
#   bash packaging/apt-repo/publish.sh --repo DIR --key KEY [--suite bookworm] DEB...
# --repo   the repository's directory (created; serve it over HTTPS, or as file: for a test)
# --key    the signing key (a gpg key id or fingerprint in $GNUPGHOME, no passphrase or an agent
#          that has it)
# --suite  the suite boards name in their sources (default bookworm); component main,
#          architectures arm64 and amd64
# Every version ever published stays in the pool AND in the index: a board's `update` rolls back
# by installing the previous version from this repository, and apt installs only versions an
# index lists (reprepro before 5.4, Debian 12's, keeps one version per package in an index).
# A version is published once: a different file under a name already in the pool is refused.
# Writes DIR/npu-agent-archive-keyring.asc (the public key boards get, for
# image/add-apt-repo.sh). Prints DIR on the last line of stdout.
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
for t in apt-ftparchive gpg dpkg-deb; do
  command -v "$t" >/dev/null || { echo "publish: $t missing (apt-get install apt-utils gnupg dpkg)" >&2; exit 1; }
done
gpg --batch --list-secret-keys "$key" >/dev/null 2>&1 || {
  echo "publish: no secret key $key in ${GNUPGHOME:-~/.gnupg}" >&2; exit 1; }
mkdir -p "$repo"
repo=$(realpath "$repo")
archs="arm64 amd64"

# The pool: pool/main/<first letter>/<package>/<package>_<version>_<arch>.deb, as Debian lays it.
for deb in "$@"; do
  [ -f "$deb" ] || { echo "publish: no package at $deb" >&2; exit 1; }
  pkg=$(dpkg-deb -f "$deb" Package) ver=$(dpkg-deb -f "$deb" Version) arch=$(dpkg-deb -f "$deb" Architecture)
  dir="$repo/pool/main/${pkg:0:1}/$pkg"
  name="${pkg}_${ver#*:}_$arch.deb"
  mkdir -p "$dir"
  if [ -e "$dir/$name" ]; then
    cmp -s "$deb" "$dir/$name" || {
      echo "publish: $name is already published with other contents; publish a new version instead" >&2; exit 1; }
  else
    cp "$deb" "$dir/$name.tmp" && mv "$dir/$name.tmp" "$dir/$name"
  fi
done

# The indexes, every version in the pool listed; then Release, signed inline (InRelease) and
# detached (Release.gpg).
dists="$repo/dists/$suite"
rm -f "$dists/Release" "$dists/InRelease" "$dists/Release.gpg"
for arch in $archs; do
  d="$dists/main/binary-$arch"
  mkdir -p "$d"
  (cd "$repo" && apt-ftparchive --arch "$arch" packages pool/main) > "$d/Packages.tmp"
  mv "$d/Packages.tmp" "$d/Packages"
  gzip -9nkf "$d/Packages"
done
(cd "$dists" && apt-ftparchive \
  -o APT::FTPArchive::Release::Origin=npu-agent -o APT::FTPArchive::Release::Label=npu-agent \
  -o "APT::FTPArchive::Release::Suite=$suite" -o "APT::FTPArchive::Release::Codename=$suite" \
  -o "APT::FTPArchive::Release::Architectures=$archs" \
  -o APT::FTPArchive::Release::Components=main \
  -o "APT::FTPArchive::Release::Description=npu-agent packages" release .) > "$repo/Release.tmp"
mv "$repo/Release.tmp" "$dists/Release"
gpg --batch --yes --local-user "$key" --clearsign -o "$dists/InRelease" "$dists/Release"
gpg --batch --yes --local-user "$key" --armor --detach-sign -o "$dists/Release.gpg" "$dists/Release"
# Check the signature before saying done.
gpg --batch --verify "$dists/InRelease" >/dev/null 2>&1 || {
  echo "publish: dists/$suite/InRelease does not verify" >&2; exit 1; }
gpg --batch --yes --armor --export "$key" > "$repo/npu-agent-archive-keyring.asc"
listed=$(for arch in $archs; do
  sed -n 's/^Package: //p; s/^Version: //p; s/^Architecture: //p' "$dists/main/binary-$arch/Packages" | paste -d' ' - - -
done | sort -u | tr '\n' ';')
echo "publish: $repo ($suite): $listed" >&2
echo "$repo"
