#!/usr/bin/env bash
# Generates the libvirt provider's API code with controller-gen
# (sigs.k8s.io/controller-tools, pinned by the wrapper module
# hack/tools/controller-gen): the deepcopy functions beside the types in
# internal/provider/libvirt/api/v1alpha1, and the CRDs, which labctl embeds,
# in embedded/provider/libvirt/crds, and the provider's ClusterRole, from the
# controller's +kubebuilder:rbac markers, in embedded/provider/libvirt/rbac.
#
#   hack/generate.sh          write them in place (make generate)
#   hack/generate.sh check    write nothing; fail, naming each stale file,
#                             when generating would change one (a test runs it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
api=internal/provider/libvirt/api/v1alpha1
crds=embedded/provider/libvirt/crds
rbac=embedded/provider/libvirt/rbac
bin=${CONTROLLER_GEN_BIN:-$root/bin/controller-gen}
go build -C hack/tools/controller-gen -o "$bin" sigs.k8s.io/controller-tools/cmd/controller-gen

gen() { # deepcopy dir, crd dir, rbac dir
  "$bin" object paths=./internal/provider/libvirt/api/... output:object:dir="$1" \
    crd:crdVersions=v1 output:crd:dir="$2"
  "$bin" rbac:roleName=labctl-libvirt-provider paths=./internal/provider/libvirt/controller/... output:rbac:dir="$3"
}

if [ "${1:-}" != check ]; then
  gen "./$api" "./$crds" "./$rbac"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/api" "$tmp/crds" "$tmp/rbac"
gen "$tmp/api" "$tmp/crds" "$tmp/rbac"
stale=0
if ! diff -u "$api/zz_generated.deepcopy.go" "$tmp/api/zz_generated.deepcopy.go" >&2; then
  stale=1
fi
for d in crds rbac; do
  if ! diff -ru "${!d}" "$tmp/$d" >&2; then
    stale=1
  fi
done
if [ $stale = 1 ]; then
  echo "generate: the files above are stale: run 'make generate' and commit the result" >&2
  exit 1
fi
echo "generate: up to date"
