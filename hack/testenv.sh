#!/usr/bin/env bash
# Builds the test bed from Go modules into .testbed/bin (gitignored), each
# binary through a small wrapper module under hack/testbed/<name>/ whose
# go.mod and go.sum pin every module exactly. Skips a binary that is already
# built from the pinned version, so a warm run takes seconds.
#
#   hack/testenv.sh                 envtest: etcd, kube-apiserver, kubectl
#   hack/testenv.sh controllers     the real controllers (issue 11): the
#                                   Cluster API managers, CAPMOX, in-cluster
#                                   IPAM, cluster-api-operator,
#                                   kube-controller-manager, kube-scheduler,
#                                   kwok and cluster-autoscaler
#   hack/testenv.sh all             both
#   hack/testenv.sh BINARY...       only these (names as in .testbed/bin)
#
# Prints progress on stderr and the binaries' folder on its last stdout line
# (KUBEBUILDER_ASSETS for envtest).
#
#   hack/testenv.sh sources         the upstream sources below, alone
#
# cluster-autoscaler has no served module: it is built from its upstream
# source at the tag pinned in hack/testbed/sources, which
# hack/upstream-src.sh puts in .testbed/src: a link to the local mirror
# ../shared/upstream (LABCTL_SHARED overrides where ../shared is; read-only
# in CI, and `go build` writes nothing there because the module's go.sum is
# complete), else a shallow git clone (git and the network needed). `all`
# gets every pinned source, the charts and image-builder's Makefile too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${TESTBED_BIN:-$root/.testbed/bin}
mkdir -p "$out"

kv=v1.35.4
kube_ldflags="-X k8s.io/component-base/version.gitVersion=$kv -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=35 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$kv -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=35"
capi_ldflags="-X sigs.k8s.io/cluster-api/version.gitVersion=v1.12.10 -X sigs.k8s.io/cluster-api/version.gitMajor=1 \
 -X sigs.k8s.io/cluster-api/version.gitMinor=12 -X sigs.k8s.io/cluster-api/version.gitTreeState=clean"

# Every binary: name, source folder, package, the module and version it must
# be built from (checked in the binary's build info, so a pin bump rebuilds;
# "-" checks presence only), extra ldflags, build tags.
# The k8s.io/kubernetes wrapper is the one kube-apiserver comes from.
envtest_set=(etcd kube-apiserver kubectl)
controllers_set=(kube-controller-manager kube-scheduler cluster-api kubeadm-bootstrap kubeadm-control-plane
  capmox ipam-in-cluster cluster-api-operator kwok cluster-autoscaler)
spec() {
  case $1 in
  etcd) echo "hack/testbed/etcd|go.etcd.io/etcd/server/v3|go.etcd.io/etcd/server/v3 v3.6.16||" ;;
  kube-apiserver | kubectl | kube-controller-manager | kube-scheduler)
    echo "hack/testbed/apiserver|k8s.io/kubernetes/cmd/$1|k8s.io/kubernetes $kv|$kube_ldflags|" ;;
  cluster-api) echo "hack/testbed/capi|sigs.k8s.io/cluster-api|sigs.k8s.io/cluster-api v1.12.10|$capi_ldflags|" ;;
  kubeadm-bootstrap) echo "hack/testbed/capi|sigs.k8s.io/cluster-api/bootstrap/kubeadm|sigs.k8s.io/cluster-api v1.12.10|$capi_ldflags|" ;;
  kubeadm-control-plane) echo "hack/testbed/capi|sigs.k8s.io/cluster-api/controlplane/kubeadm|sigs.k8s.io/cluster-api v1.12.10|$capi_ldflags|" ;;
  capmox) echo "hack/testbed/capmox|github.com/ionos-cloud/cluster-api-provider-proxmox/cmd|github.com/ionos-cloud/cluster-api-provider-proxmox v0.9.0||" ;;
  ipam-in-cluster) echo "hack/testbed/ipam|sigs.k8s.io/cluster-api-ipam-provider-in-cluster|sigs.k8s.io/cluster-api-ipam-provider-in-cluster v1.0.3||" ;;
  cluster-api-operator) echo "hack/testbed/operator|sigs.k8s.io/cluster-api-operator/cmd|sigs.k8s.io/cluster-api-operator v0.28.0||" ;;
  kwok) echo "hack/testbed/kwok|sigs.k8s.io/kwok/cmd/kwok|sigs.k8s.io/kwok v0.8.0|-X sigs.k8s.io/kwok/pkg/consts.Version=v0.8.0|" ;;
  cluster-autoscaler) echo "src:cluster-autoscaler-1.35.0|.|-||clusterapi" ;;
  *) return 1 ;;
  esac
}

# built reports whether bin exists and was built from "module version".
built() {
  local bin=$1 want=$2
  [ -x "$bin" ] || return 1
  [ "$want" = - ] && return 0
  go version -m "$bin" 2>/dev/null | grep -qE "[[:space:]]${want% *}[[:space:]]+${want#* }([[:space:]]|$)"
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

build() { # binary name
  local name=$1 line dir pkg want ldflags tags commit=
  line=$(spec "$name") || { echo "testenv: unknown binary $name (known: ${envtest_set[*]} ${controllers_set[*]})" >&2; exit 2; }
  IFS='|' read -r dir pkg want ldflags tags <<<"$line"
  if [[ $dir = src:* ]]; then
    # An upstream source: the stamp beside the binary names the commit it
    # was built from, so a new pin rebuilds.
    local source=${dir#src:}
    commit=$(awk -v n="$source" '$1 == n { print $4 }' "${TESTBED_SOURCES:-$root/hack/testbed/sources}")
    want=-
    if [ -x "$out/$name" ] && [ "$(cat "$out/.$name.commit" 2>/dev/null)" = "$commit" ]; then
      echo "testbed: $name present" >&2
      return
    fi
    if ! dir=$("$root/hack/upstream-src.sh" "$source"); then
      unavailable "$name" "its upstream source $source could not be had (above)"
      return
    fi
  else
    dir=$root/$dir
    if built "$out/$name" "$want"; then echo "testbed: $name present" >&2; return; fi
  fi
  local from=$want
  [ "$want" != - ] || from=$dir
  echo "testbed: building $name from $from (cold: minutes)" >&2
  local start=$SECONDS tmp="$out/.$name.$$.tmp"
  # -mod=readonly: the committed go.sum is the whole truth, and nothing is
  # written into the source folder (../shared is read-only in CI).
  # nice: the test machines are small and shared.
  if ! (cd "$dir" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" nice -n 19 \
    go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$tmp" "$pkg"); then
    rm -f "$tmp"
    echo "testbed: building $name failed" >&2
    exit 1
  fi
  mv "$tmp" "$out/$name"
  if [ -n "$commit" ]; then echo "$commit" >"$out/.$name.commit"; fi
  echo "testbed: built $name in $((SECONDS - start)) s" >&2
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
for n in "${names[@]}"; do build "$n"; done
if [ -n "$sources" ] && ! "$root/hack/upstream-src.sh" all >/dev/null; then
  unavailable "the upstream sources" "hack/upstream-src.sh all failed (above)"
fi
echo "$out"
