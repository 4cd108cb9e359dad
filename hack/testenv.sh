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
#                                   kwok, cluster-autoscaler, Kamaji and the
#                                   Kamaji control-plane provider
#   hack/testenv.sh all             both
#   hack/testenv.sh BINARY...       only these (names as in .testbed/bin)
#
# Prints progress on stderr and the binaries' folder on its last stdout line
# (KUBEBUILDER_ASSETS for envtest).
#
# cluster-autoscaler has no served module: it is built from the upstream
# source in ../shared/upstream beside the checkout (LABCTL_SHARED overrides
# where ../shared is), which is read-only in CI; `go build` writes nothing
# there because the module's go.sum is complete.
#
# Kamaji has no served module at the commit the provider needs either. Its
# source is reached through .testbed/src/kamaji-e51909f, a link to that
# folder of ../shared/upstream made here: the Kamaji manager is built inside
# it, and the provider's wrapper module replaces github.com/clastix/kamaji
# with it by that relative path, which is the same in every checkout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${TESTBED_BIN:-$root/.testbed/bin}
shared=${LABCTL_SHARED:-$root/../shared}
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
  capmox ipam-in-cluster cluster-api-operator kwok cluster-autoscaler kamaji kamaji-provider)
kamaji_src=.testbed/src/kamaji-e51909f
kamaji_ldflags="-X github.com/clastix/kamaji/internal.GitCommit=e51909fae3f5 -X github.com/clastix/kamaji/internal.GitTag=26.4.2-edge"
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
  cluster-autoscaler) echo "$shared/upstream/cluster-autoscaler-1.35.0|.|-||clusterapi" ;;
  kamaji) echo "$kamaji_src|.|-|$kamaji_ldflags|" ;;
  kamaji-provider) echo "hack/testbed/kamaji-provider|github.com/clastix/cluster-api-control-plane-provider-kamaji|github.com/clastix/cluster-api-control-plane-provider-kamaji v0.20.0||" ;;
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

# kamaji_source links .testbed/src/kamaji-e51909f to the upstream folder
# beside the checkout, once; a folder already there (a clone of the same
# commit) is kept.
kamaji_source() {
  local link=$root/$kamaji_src from=$shared/upstream/kamaji-e51909f
  [ -e "$link/go.mod" ] && return
  [ -f "$from/go.mod" ] || return 0 # build reports the missing go.mod
  mkdir -p "$(dirname "$link")"
  ln -sfn "$from" "$link"
}

build() { # binary name
  local name=$1 line dir pkg want ldflags tags
  line=$(spec "$name") || { echo "testenv: unknown binary $name (known: ${envtest_set[*]} ${controllers_set[*]})" >&2; exit 2; }
  IFS='|' read -r dir pkg want ldflags tags <<<"$line"
  [[ $dir = /* ]] || dir=$root/$dir
  case $name in kamaji | kamaji-provider) kamaji_source ;; esac
  if built "$out/$name" "$want"; then echo "testbed: $name present" >&2; return; fi
  local src=$dir
  [ "$name" != kamaji-provider ] || src=$root/$kamaji_src
  if [ ! -f "$src/go.mod" ]; then
    local why="$src/go.mod is missing; the upstream source must be beside the checkout as ../shared (read-only is fine), or set LABCTL_SHARED to its folder"
    if [ -n "${CI:-}${LABCTL_REQUIRE_TESTBED:-}" ]; then
      echo "testbed: cannot build $name: $why" >&2
      exit 1
    fi
    # Outside CI the tests that need it skip, saying why.
    echo "testbed: skipping $name: $why" >&2
    return
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
  echo "testbed: built $name in $((SECONDS - start)) s" >&2
}

names=()
[ $# -gt 0 ] || set -- envtest
for arg in "$@"; do
  case $arg in
  envtest) names+=("${envtest_set[@]}") ;;
  controllers) names+=("${controllers_set[@]}") ;;
  all) names+=("${envtest_set[@]}" "${controllers_set[@]}") ;;
  *) names+=("$arg") ;;
  esac
done
for n in "${names[@]}"; do build "$n"; done
echo "$out"
