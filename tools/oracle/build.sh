#!/usr/bin/env bash
# Build the oracle: the Job controller's package (k8s.io/kubernetes at the version
# tools/k8s/go.mod pins) with our oracle_test.go beside it, as a test binary, into a cache keyed
# by that version and a hash of the harness's sources. Prints the binary's path on its last line.
#
# Nothing of Kubernetes is kept in this repository: the package's non-test files are copied
# from the Go module cache into a temporary module that requires k8s.io/kubernetes with the
# replaces of tools/k8s/go.mod (its go.mod, renamed), and extract/main.go writes the table of
# TestSyncJobWithJobPodFailurePolicy from the test source there. Exit 3: no Go; exit 4: the
# module cache lacks the package (tools/k8s/build.sh fills it). Idempotent: a cached binary is
# kept; one is only put in place once fully linked.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s=$(cd "$here/../k8s" && pwd)
version=$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' "$k8s/go.mod")
[[ -n $version ]] || { echo "oracle: $k8s/go.mod pins no k8s.io/kubernetes" >&2; exit 2; }
hash=$(cat "$here/build.sh" "$here/oracle_test.go" "$here/extract/main.go" "$k8s/go.mod" "$k8s/go.sum" |
    sha256sum | cut -c1-12)
out=${JOBRULES_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobrules}/oracle-$version-$hash
if [[ -x $out/oracle.test ]]; then
    echo "$out/oracle.test"; exit 0
fi
if ! command -v go >/dev/null; then
    echo "oracle: no go command on PATH (Go >= 1.26 builds the oracle)" >&2; exit 3
fi
src=$(go env GOMODCACHE)/k8s.io/kubernetes@$version/pkg/controller/job
if [[ ! -f $src/pod_failure_policy.go ]]; then
    echo "oracle: k8s.io/kubernetes $version is not in the Go module cache ($src); tools/k8s/build.sh downloads it" >&2
    exit 4
fi
mkdir -p "$out"
tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "building the oracle (k8s.io/kubernetes $version pkg/controller/job) into $out" >&2
awk 'NR == 1 && $1 == "module" {print "module jobrules.local/tools/oracle"; next} {print}' \
    "$k8s/go.mod" > "$tmp/go.mod"
cp "$k8s/go.sum" "$tmp/go.sum"
mkdir "$tmp/job"
for file in "$src"/*.go; do
    [[ $file == *_test.go ]] || cp "$file" "$tmp/job/"
done
chmod u+w "$tmp/job"/*.go                      # the module cache's files are read-only
cp "$here/oracle_test.go" "$tmp/job/jobrules_oracle_test.go"
go run "$here/extract/main.go" "$src" TestSyncJobWithJobPodFailurePolicy \
    jobrulesPodFailurePolicyTable "$tmp/job/zz_jobrules_table_test.go"
(cd "$tmp" && CGO_ENABLED=0 GOFLAGS=-mod=mod go test -c -trimpath -o "$tmp/oracle.test" ./job)
mv "$tmp/oracle.test" "$out/oracle.test"
echo "$out/oracle.test"
