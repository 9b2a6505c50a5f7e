#!/usr/bin/env bash
# Build etcd, kube-apiserver and kube-controller-manager from the pinned Go modules in this
# folder into a cache keyed by version. Idempotent: does nothing when the binaries are there.
# Prints the directory that holds the binaries on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s_version=$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' "$here/go.mod")
etcd_version=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2; exit}' "$here/go.mod")
out=${JOBRULES_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobrules}/k8s-${k8s_version}-etcd-${etcd_version}
if [[ -x $out/kube-apiserver && -x $out/kube-controller-manager && -x $out/etcd ]]; then
    echo "$out"; exit 0
fi
mkdir -p "$out"
tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
minor=${k8s_version#v1.}; minor=${minor%%.*}
vpkg=k8s.io/component-base/version
ldflags="-s -w \
 -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor \
 -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
cd "$here"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
echo "building control plane $k8s_version (etcd $etcd_version) into $out" >&2
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
mv "$tmp"/kube-apiserver "$tmp"/kube-controller-manager "$tmp"/etcd "$out"/
echo "$out"
