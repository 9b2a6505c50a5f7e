#!/usr/bin/env bash
# Build tools/celcost (what kube-apiserver's CEL spends on a MutatingAdmissionPolicy, counted by
# k8s.io/apiserver's own evaluators) against the k8s.io/apiserver that tools/k8s/go.mod pins,
# from the Go module cache only (GOPROXY=off), into a cache keyed by a hash of the sources and
# of that go.mod. Prints the binary's path on its last line. Exit 3: no Go; exit 4: the module
# cache lacks what it needs (tools/k8s/build.sh fills it). Idempotent; the binary is put in
# place only once fully linked.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s=$(cd "$here/../k8s" && pwd)
hash=$(cat "$here/build.sh" "$here/main.go" "$k8s/go.mod" "$k8s/go.sum" | sha256sum | cut -c1-12)
out=${JOBRULES_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobrules}/celcost-$hash
if [[ -x $out/celcost ]]; then
    echo "$out/celcost"; exit 0
fi
if ! command -v go >/dev/null; then
    echo "celcost: no go command on PATH" >&2; exit 3
fi
mkdir -p "$out"
tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
awk 'NR == 1 && $1 == "module" {print "module jobrules.local/tools/celcost"; next} {print}' \
    "$k8s/go.mod" > "$tmp/go.mod"
cp "$k8s/go.sum" "$tmp/go.sum"
cp "$here/main.go" "$tmp/main.go"
echo "building celcost into $out" >&2
if ! (cd "$tmp" && CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=mod go build -trimpath -o "$tmp/celcost" .) 2>"$tmp/err"; then
    if grep -q "GOPROXY=off\|module lookup disabled" "$tmp/err"; then
        echo "celcost: the Go module cache lacks a module it needs; tools/k8s/build.sh fills it" >&2
        cat "$tmp/err" >&2; exit 4
    fi
    cat "$tmp/err" >&2; exit 1
fi
mv "$tmp/celcost" "$out/celcost"
echo "$out/celcost"
