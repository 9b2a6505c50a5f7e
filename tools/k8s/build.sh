#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-controller-manager and kube-scheduler from the pinned Go
# modules in this folder into a cache keyed by version, plus any extra kubernetes commands named
# as arguments (`build.sh kubectl`). Idempotent: builds only what is missing, and keeps each
# binary as soon as it is built, so an interrupted build resumes. Prints the binaries' directory
# on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s_version=$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' "$here/go.mod")
etcd_version=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2; exit}' "$here/go.mod")
out=${JOBRULES_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobrules}/k8s-${k8s_version}-etcd-${etcd_version}
missing=()
for name in etcd kube-apiserver kube-controller-manager kube-scheduler "$@"; do
    [[ -x $out/$name ]] || missing+=("$name")
done
if (( ${#missing[@]} == 0 )); then
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
echo "building ${missing[*]} (kubernetes $k8s_version, etcd $etcd_version) into $out" >&2
for name in "${missing[@]}"; do
    if [[ $name == etcd ]]; then
        go build -trimpath -ldflags "-s -w" -o "$tmp/$name" go.etcd.io/etcd/server/v3
    else
        go build -trimpath -ldflags "$ldflags" -o "$tmp/$name" "k8s.io/kubernetes/cmd/$name"
    fi
    mv "$tmp/$name" "$out/$name"
done
echo "$out"
