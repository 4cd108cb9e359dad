#!/usr/bin/env bash
# Gets the upstream sources the test bed builds from, where the module proxy
# does not serve them, at the tag and commit pinned in hack/testbed/sources,
# into .testbed/src/NAME (gitignored), and prints each folder on stdout,
# one a line, in the order asked. Progress and errors go to stderr.
#
#   hack/upstream-src.sh NAME...     the names are the first column of the pins
#   hack/upstream-src.sh all         every pinned source
#
# For each, in this order:
#   1. .testbed/src/NAME is there and still the pinned commit: nothing to do.
#   2. ../shared/upstream/NAME (LABCTL_SHARED names another ../shared), a
#      local mirror, whose UPSTREAM file names the pinned commit:
#      .testbed/src/NAME becomes a link to it. Nothing is written there.
#   3. A shallow clone of the repository (git and the network needed): the
#      tag by `git clone --depth 1 --branch TAG`, a bare commit by `git
#      fetch --depth 1 URL COMMIT`. A clone whose commit is not the pinned
#      one is refused and removed. .testbed/src/NAME links to the pinned
#      folder inside the clone (.testbed/src/NAME.git).
#
# The link's path never changes, so a wrapper module under hack/testbed may
# replace a module with ../../../.testbed/src/NAME.
#
# TESTBED_SRC and TESTBED_SOURCES move the cache and the pin file (tests).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${TESTBED_SRC:-$root/.testbed/src}
pins=${TESTBED_SOURCES:-$root/hack/testbed/sources}
shared=${LABCTL_SHARED:-$root/../shared}

die() {
  echo "upstream-src: $*" >&2
  exit 1
}

# pin NAME: sets url, ref, commit, folder from the pin file.
pin() {
  local line
  line=$(awk -v n="$1" '$1 == n && !/^#/' "$pins") || die "reading $pins failed"
  [ -n "$line" ] || die "$1 is not pinned in $pins (pinned: $(awk '!/^#/ && NF { printf "%s ", $1 }' "$pins"))"
  read -r _ url ref commit folder <<<"$line"
  [[ $commit =~ ^[0-9a-f]{40}$ ]] || die "$pins: $1: the commit '$commit' is not a full 40-hex-digit hash; write the commit the tag names (git rev-parse TAG^{commit})"
  [ -n "$folder" ] || die "$pins: $1: the folder column is missing (. for the whole repository)"
}

# current NAME: the cache entry is there and is the pinned commit.
current() {
  local entry=$src/$1
  [ -e "$entry" ] || return 1
  if [ -d "$src/$1.git" ]; then
    [ "$(git -C "$src/$1.git" rev-parse -q --verify 'HEAD^{commit}' 2>/dev/null)" = "$commit" ]
  else
    mirrored "$entry"
  fi
}

# mirrored DIR: DIR's UPSTREAM file names the pinned commit.
mirrored() {
  [ -f "$1/UPSTREAM" ] && grep -qw "$commit" "$1/UPSTREAM"
}

clone() { # NAME
  local name=$1 tmp="$src/.$1.$$.tmp"
  command -v git >/dev/null 2>&1 ||
    die "$name: git is needed to fetch it from $url (no mirror at $shared/upstream/$name): install git, or put the mirror there"
  rm -rf "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  local at="tag $ref"
  [ "$ref" != - ] || at="commit $commit"
  echo "upstream-src: cloning $name from $url at $at (git, network)" >&2
  local ok=1
  if [ "$ref" = - ]; then
    git init -q "$tmp" &&
      git -C "$tmp" fetch -q --depth 1 "$url" "$commit" &&
      git -C "$tmp" -c advice.detachedHead=false checkout -q FETCH_HEAD || ok=0
  else
    git -c advice.detachedHead=false clone -q --depth 1 --branch "$ref" "$url" "$tmp" || ok=0
  fi
  [ $ok = 1 ] || die "$name: fetching $url at $at failed (above); the clone needs the network, or a mirror at $shared/upstream/$name"
  local got
  got=$(git -C "$tmp" rev-parse 'HEAD^{commit}')
  [ "$got" = "$commit" ] ||
    die "$name: $url at $at is commit $got, not the pinned $commit: refused (if upstream moved the tag, check the new commit and pin it in $pins)"
  [ -d "$tmp/$folder" ] || die "$name: $url at $commit has no folder $folder (the folder column of $pins)"
  rm -rf "$src/$name.git"
  mv "$tmp" "$src/$name.git"
  trap - EXIT
  ln -sfn "$name.git/$folder" "$src/$name"
}

fetch() { # NAME
  local name=$1
  pin "$name"
  if current "$name"; then
    echo "upstream-src: $name present" >&2
  else
    mkdir -p "$src"
    rm -rf "${src:?}/$name"
    local mirror=$shared/upstream/$name
    if [ -d "$mirror" ] && mirrored "$mirror"; then
      echo "upstream-src: $name from the mirror $mirror" >&2
      ln -sfn "$(cd "$mirror" && pwd)" "$src/$name"
    else
      if [ -d "$mirror" ]; then
        echo "upstream-src: not using $mirror: its UPSTREAM file does not name the pinned commit $commit" >&2
      fi
      clone "$name"
    fi
  fi
  echo "$src/$name"
}

[ $# -gt 0 ] || die "usage: hack/upstream-src.sh NAME... | all (names in $pins)"
if [ "$1" = all ]; then
  mapfile -t names < <(awk '!/^#/ && NF { print $1 }' "$pins")
  set -- "${names[@]}"
fi
for n in "$@"; do fetch "$n"; done
