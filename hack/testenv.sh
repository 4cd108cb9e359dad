#!/usr/bin/env bash
# Builds the test bed from Go modules into .testbed/bin (gitignored), each
# binary through a small wrapper module under hack/testbed/<wrapper>/ whose
# go.mod and go.sum pin every module exactly, or from an upstream source
# (below). Skips a binary that is already built from the same pins, so a
# warm run takes seconds.
#
#   hack/testenv.sh                 envtest: etcd, kube-apiserver, kubectl
#   hack/testenv.sh controllers     the real controllers (issue 11): the
#                                   Cluster API managers, CAPMOX, in-cluster
#                                   IPAM, cluster-api-operator,
#                                   kube-controller-manager, kube-scheduler,
#                                   kwok, cluster-autoscaler, Kamaji and the
#                                   Kamaji control-plane provider
#   hack/testenv.sh all             both, and every upstream source below
#   hack/testenv.sh sources         the upstream sources alone
#   hack/testenv.sh BINARY...       only these (names as in .testbed/bin)
#
# Prints progress on stderr and the binaries' folder on its last stdout line
# (KUBEBUILDER_ASSETS for envtest). "built A, B in N s" lines are what
# hack/bench-testbed.sh reads.
#
# Speed (docs/testing.md, "Build times"): the binaries of one wrapper share
# one module graph, so each package of it is compiled once; and the missing
# binaries of one wrapper, with the same ldflags and tags, are built by one
# `go build -o DIR/ PKG...`, so one binary's link runs beside another's
# compiling. Binaries whose main packages share a name (two "kubeadm", two
# "cmd") go in separate invocations.
#
# Parts without a served module are built from their upstream source at the
# tag or commit pinned in hack/testbed/sources, which hack/upstream-src.sh
# puts in .testbed/src: a link to the local mirror ../shared/upstream
# (LABCTL_SHARED overrides where ../shared is; read-only in CI, and `go
# build` writes nothing there because the module's go.sum is complete), else
# a shallow git clone (git and the network needed). A wrapper whose go.mod
# replaces a module with ../../../.testbed/src/NAME gets NAME the same way
# before it is built.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${TESTBED_BIN:-$root/.testbed/bin}
sources_file=${TESTBED_SOURCES:-$root/hack/testbed/sources}
mkdir -p "$out"

kv=v1.35.4
# kube_ldflags VERSION: what Kubernetes' own build stamps (hack/lib/version.sh
# kube::version::ldflags), so /version and --version tell the release.
kube_ldflags() {
  echo "-X k8s.io/component-base/version.gitVersion=$1 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=35 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$1 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=35"
}
# The release before the pin, whose control plane the upgrade tests start
# a workload cluster at (hack/testbed/apiserver-$kv_prev); its binaries
# are named NAME-$kv_prev.
kv_prev=v1.35.3
capi_ldflags="-X sigs.k8s.io/cluster-api/version.gitVersion=v1.12.10 -X sigs.k8s.io/cluster-api/version.gitMajor=1 \
 -X sigs.k8s.io/cluster-api/version.gitMinor=12 -X sigs.k8s.io/cluster-api/version.gitTreeState=clean"

# Every binary: where it is built (a wrapper folder, or src:NAME for an
# upstream source of hack/testbed/sources), its main package, the module
# and version it must be built from (checked in the binary's build info;
# "-" for none), extra ldflags, build tags.
# The wrappers and why each is apart (docs/testing.md, "One graph per
# version set"):
#   apiserver    k8s.io/kubernetes v1.35.4: the control plane
#   apiserver-v1.35.3  the same at v1.35.3, the release an upgrade starts from
#   controllers  Cluster API v1.12.10's managers, CAPMOX and the operator:
#                one k8s.io v0.34, controller-runtime v0.22, Cluster API
#                v1.12.10 version set
#   ipam         in-cluster IPAM v1.0.3: in the controllers' graph MVS would
#                take v1.1.0 (CAPMOX requires it), not labctl's pin
#   kwok         kwok v0.8.0 needs k8s.io v0.36, which would move the
#                controllers off the version set their releases were tested
#                with
#   etcd         etcd v3.6.16
# A new part goes into the graph whose version set its release was made
# with (check with `go list -m all` in the wrapper that nothing else moves),
# else into a wrapper of its own.
envtest_set=(etcd kube-apiserver kubectl)
controllers_set=(kube-controller-manager kube-scheduler
  kube-apiserver-$kv_prev kube-controller-manager-$kv_prev kube-scheduler-$kv_prev cluster-api kubeadm-bootstrap kubeadm-control-plane
  capmox ipam-in-cluster cluster-api-operator kwok cluster-autoscaler kamaji kamaji-provider)
kamaji_ldflags="-X github.com/clastix/kamaji/internal.GitCommit=e51909fae3f5 -X github.com/clastix/kamaji/internal.GitTag=26.4.2-edge"
spec() {
  case $1 in
  etcd) echo "hack/testbed/etcd|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3 v3.6.16||" ;;
  kube-apiserver | kubectl | kube-controller-manager | kube-scheduler)
    echo "hack/testbed/apiserver|k8s.io/kubernetes/cmd/$1|k8s.io/kubernetes $kv|$(kube_ldflags $kv)|" ;;
  kube-apiserver-$kv_prev | kube-controller-manager-$kv_prev | kube-scheduler-$kv_prev)
    echo "hack/testbed/apiserver-$kv_prev|k8s.io/kubernetes/cmd/${1%-"$kv_prev"}|k8s.io/kubernetes $kv_prev|$(kube_ldflags $kv_prev)|" ;;
  cluster-api) echo "hack/testbed/controllers|sigs.k8s.io/cluster-api|sigs.k8s.io/cluster-api v1.12.10|$capi_ldflags|" ;;
  kubeadm-bootstrap) echo "hack/testbed/controllers|sigs.k8s.io/cluster-api/bootstrap/kubeadm|sigs.k8s.io/cluster-api v1.12.10|$capi_ldflags|" ;;
  kubeadm-control-plane) echo "hack/testbed/controllers|sigs.k8s.io/cluster-api/controlplane/kubeadm|sigs.k8s.io/cluster-api v1.12.10|$capi_ldflags|" ;;
  capmox) echo "hack/testbed/controllers|github.com/ionos-cloud/cluster-api-provider-proxmox/cmd|github.com/ionos-cloud/cluster-api-provider-proxmox v0.9.0||" ;;
  cluster-api-operator) echo "hack/testbed/controllers|sigs.k8s.io/cluster-api-operator/cmd|sigs.k8s.io/cluster-api-operator v0.28.0||" ;;
  ipam-in-cluster) echo "hack/testbed/ipam|sigs.k8s.io/cluster-api-ipam-provider-in-cluster|sigs.k8s.io/cluster-api-ipam-provider-in-cluster v1.0.3||" ;;
  kwok) echo "hack/testbed/kwok|sigs.k8s.io/kwok/cmd/kwok|sigs.k8s.io/kwok v0.8.0|-X sigs.k8s.io/kwok/pkg/consts.Version=v0.8.0|" ;;
  cluster-autoscaler) echo "src:cluster-autoscaler-1.35.0|.|-||clusterapi" ;;
  kamaji) echo "src:kamaji-e51909f|.|-|$kamaji_ldflags|" ;;
  kamaji-provider) echo "hack/testbed/kamaji-provider|github.com/clastix/cluster-api-control-plane-provider-kamaji|github.com/clastix/cluster-api-control-plane-provider-kamaji v0.20.0||" ;;
  *) return 1 ;;
  esac
}

# unavailable NAME WHY: under CI a missing part fails the build; outside
# it the tests that need the part skip, saying why.
unavailable() {
  if [ -n "${CI:-}${LABCTL_REQUIRE_TESTBED:-}" ]; then
    echo "testbed: cannot build $1: $2" >&2
    exit 1
  fi
  echo "testbed: skipping $1: $2" >&2
}

# stamp DIR SOURCE PKG LDFLAGS TAGS: what a binary must have been built
# from, kept beside it as .NAME.stamp: a hash of the wrapper's go.mod and
# go.sum (any change of the graph rebuilds) or of the upstream source's
# pinned commit, with the package, ldflags and tags.
stamp() {
  {
    if [ -n "$2" ]; then
      awk -v n="$2" '$1 == n { print "commit", $4 }' "$sources_file"
    else
      cat "$1/go.mod" "$1/go.sum"
      local s
      for s in $(wrapper_sources "$1"); do
        awk -v n="$s" '$1 == n { print "commit", $4 }' "$sources_file"
      done
    fi
    printf '%s\n' "$3" "$4" "$5"
  } | sha256sum | cut -d' ' -f1
}

# wrapper_sources DIR: the upstream sources a wrapper's go.mod replaces a
# module with (../../../.testbed/src/NAME), which must be there to build.
wrapper_sources() {
  grep -E '=>' "$1/go.mod" | grep -oE '\.testbed/src/[A-Za-z0-9._-]+' | sed 's#.*/##' | sort -u || true
}

# source_dir NAME: the folder of an upstream source (hack/upstream-src.sh,
# which does nothing when it is there already), remembered when not called
# in a subshell.
declare -A src_dir=()
source_dir() {
  if [ -z "${src_dir[$1]:-}" ]; then
    src_dir[$1]=$("$root/hack/upstream-src.sh" "$1") || return 1
  fi
  echo "${src_dir[$1]}"
}

# present NAME WANT STAMP: the binary is there, built from "module version"
# (its build info) and from the same pins (its stamp).
present() {
  local bin=$out/$1 want=$2
  [ -x "$bin" ] && [ "$(cat "$out/.$1.stamp" 2>/dev/null)" = "$3" ] || return 1
  [ "$want" = - ] && return 0
  go version -m "$bin" 2>/dev/null | grep -qE "[[:space:]]${want% *}[[:space:]]+${want#* }([[:space:]]|$)"
}

# exe PACKAGE: the file name `go build -o DIR/` gives a main package (its
# last path element, or the one before a major-version suffix).
exe() {
  local p=${1%/}
  local last=${p##*/}
  if [[ $last =~ ^v[0-9]+$ ]]; then
    p=${p%/*}
    last=${p##*/}
  fi
  echo "$last"
}

# Pass 1: what is missing, by build key (folder, ldflags, tags).
keys=()
declare -A key_names=() key_dir=() key_ldflags=() key_tags=() name_pkg=() name_stamp=() name_want=()
plan() { # binary name
  local name=$1 line dir pkg want ldflags tags source=
  line=$(spec "$name") || { echo "testenv: unknown binary $name (known: ${envtest_set[*]} ${controllers_set[*]})" >&2; exit 2; }
  IFS='|' read -r dir pkg want ldflags tags <<<"$line"
  if [[ $dir = src:* ]]; then
    source=${dir#src:}
    dir=
  else
    dir=$root/$dir
  fi
  local st
  st=$(stamp "$dir" "$source" "$pkg" "$ldflags" "$tags")
  if present "$name" "$want" "$st"; then
    echo "testbed: $name present" >&2
    return
  fi
  if [ -n "$source" ]; then
    if ! dir=$(source_dir "$source"); then
      unavailable "$name" "its upstream source $source could not be had (above)"
      return
    fi
  else
    local s
    for s in $(wrapper_sources "$dir"); do
      if ! source_dir "$s" >/dev/null; then
        unavailable "$name" "the upstream source $s its wrapper replaces a module with could not be had (above)"
        return
      fi
    done
  fi
  local key="$dir|$ldflags|$tags"
  if [ -z "${key_names[$key]+x}" ]; then
    keys+=("$key")
    key_names[$key]=
    key_dir[$key]=$dir key_ldflags[$key]=$ldflags key_tags[$key]=$tags
  fi
  key_names[$key]+=" $name"
  name_pkg[$name]=$pkg name_stamp[$name]=$st name_want[$name]=$want
}

# gobuild DIR LDFLAGS TAGS NAME...: one go build of the NAMEs' packages.
gobuild() {
  local dir=$1 ldflags=$2 tags=$3
  shift 3
  local tmp pkgs=() n what=
  tmp=$(mktemp -d "$out/.build.XXXXXX")
  for n in "$@"; do
    pkgs+=("${name_pkg[$n]}")
    if [ "${name_want[$n]}" = - ]; then what+="$n from $dir, "; else what+="$n from ${name_want[$n]}, "; fi
  done
  local target=$tmp/
  [ $# -gt 1 ] || target=$tmp/$1
  echo "testbed: building ${what%, } (cold: minutes)" >&2
  local start=$SECONDS
  # -mod=readonly: the committed go.sum is the whole truth, and nothing is
  # written into the source folder (../shared is read-only in CI).
  # nice: the test machines are small and shared.
  if ! (cd "$dir" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" nice -n 19 \
    go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$target" "${pkgs[@]}"); then
    rm -rf "$tmp"
    echo "testbed: building $* failed" >&2
    exit 1
  fi
  for n in "$@"; do
    local f=$tmp/$n
    [ $# -eq 1 ] || f=$tmp/$(exe "${name_pkg[$n]}")
    mv "$f" "$out/$n"
    echo "${name_stamp[$n]}" >"$out/.$n.stamp"
  done
  rm -rf "$tmp"
  echo "testbed: built $* in $((SECONDS - start)) s" >&2
}

names=()
sources=
[ $# -gt 0 ] || set -- envtest
for arg in "$@"; do
  case $arg in
  envtest) names+=("${envtest_set[@]}") ;;
  controllers) names+=("${controllers_set[@]}") ;;
  all)
    names+=("${envtest_set[@]}" "${controllers_set[@]}")
    sources=1
    ;;
  sources) sources=1 ;;
  *) names+=("$arg") ;;
  esac
done
declare -A seen=()
for n in "${names[@]}"; do
  [ -z "${seen[$n]:-}" ] || continue
  seen[$n]=1
  plan "$n"
done

# Pass 2: per key, as few go builds as the package names allow.
for key in "${keys[@]}"; do
  read -ra todo <<<"${key_names[$key]}"
  while [ ${#todo[@]} -gt 0 ]; do
    batch=() rest=()
    declare -A taken=()
    for n in "${todo[@]}"; do
      e=$(exe "${name_pkg[$n]}")
      if [ -n "${taken[$e]:-}" ]; then rest+=("$n"); else
        taken[$e]=1
        batch+=("$n")
      fi
    done
    unset taken
    gobuild "${key_dir[$key]}" "${key_ldflags[$key]}" "${key_tags[$key]}" "${batch[@]}"
    todo=("${rest[@]}")
  done
done

if [ -n "$sources" ] && ! "$root/hack/upstream-src.sh" all >/dev/null; then
  unavailable "the upstream sources" "hack/upstream-src.sh all failed (above)"
fi
echo "$out"
