#!/usr/bin/env bash
# The whole test suite as CI runs it: set-up, control-plane binaries (built once, cached), pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
if [[ -z ${KUBEBUILDER_ASSETS:-} ]]; then
    JOBRULES_K8S_BIN=$(bash tools/k8s/build.sh | tail -n 1)
    export JOBRULES_K8S_BIN
fi
exec .venv/bin/python -m pytest "$@"
