#!/usr/bin/env bash
# Builds the test bed: kube-apiserver and kubectl v1.35.4 and etcd v3.6.16,
# from Go modules, into .testbed/bin (gitignored). Skips what is already built.
# Prints the KUBEBUILDER_ASSETS folder on its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${TESTBED_BIN:-$root/.testbed/bin}
mkdir -p "$out"

kv=v1.35.4
ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$kv -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=35 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$kv -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=35"

build() { # dir, binary, package
  local dir=$1 bin=$2 pkg=$3
  if [ -x "$out/$bin" ]; then echo "testbed: $bin present" >&2; return; fi
  echo "testbed: building $bin (first time takes several minutes)" >&2
  local start=$SECONDS
  (cd "$root/hack/testbed/$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$out/$bin.tmp" "$pkg")
  mv "$out/$bin.tmp" "$out/$bin"
  echo "testbed: built $bin in $((SECONDS - start)) s" >&2
}

build etcd etcd go.etcd.io/etcd/server/v3
build apiserver kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build apiserver kubectl k8s.io/kubernetes/cmd/kubectl
echo "$out"
