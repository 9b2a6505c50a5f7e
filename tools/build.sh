#!/usr/bin/env bash
# Build the command pinned by tools/TOOL (kwok, training-operator) into a cache keyed by its
# version, and print the folder holding it on the last line. TOOL's tools.go imports the one
# main package to build; its go.mod pins the module that holds it. Idempotent: a cached binary
# is kept, and one is only put in place once fully linked, so an interrupted build starts over.
set -euo pipefail
tool=${1:?usage: build.sh TOOL (a folder of tools/ with go.mod and tools.go)}
here=$(cd "$(dirname "$0")" && pwd)
dir=$here/$tool
[[ -f $dir/go.mod && -f $dir/tools.go ]] || { echo "build.sh: no tool $tool in $here" >&2; exit 2; }
package=$(awk -F'"' '/^[ \t]*_ "/ {print $2; exit}' "$dir/tools.go")
read -r module version < <(awk -v pkg="$package" '
    {m = $1; v = $2} m == "require" {m = $2; v = $3}
    m != "module" && m != "go" && (pkg == m || index(pkg, m "/") == 1) {print m, v; exit}' "$dir/go.mod")
[[ -n ${version:-} ]] || { echo "build.sh: $dir/go.mod pins no module holding $package" >&2; exit 2; }
out=${JOBRULES_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobrules}/$tool-$version
if [[ -x $out/$tool ]]; then
    echo "$out"; exit 0
fi
mkdir -p "$out"
tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building $tool ($module $version) into $out" >&2
cd "$dir"
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$tmp/$tool" "$package"
mv "$tmp/$tool" "$out/$tool"
echo "$out"
