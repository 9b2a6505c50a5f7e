#!/usr/bin/env bash
# The whole test suite as CI runs it: set-up, control-plane binaries (built once, cached), pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# Control-plane binaries and kubectl: an envtest assets folder or a folder of your own wins; else
# build them (about 11 minutes the first time on 2 cores, then cached).
if [[ -z ${KUBEBUILDER_ASSETS:-} && -z ${JOBRULES_K8S_BIN:-} ]]; then
    JOBRULES_K8S_BIN=$(bash tools/k8s/build.sh kubectl | tail -n 1)
    export JOBRULES_K8S_BIN
fi
# KWOK, the Kubeflow training operator and Kueue, unless folders of your own are named (a few
# minutes each the first time, then cached). Envtest assets have no scheduler to use them with.
if [[ -z ${KUBEBUILDER_ASSETS:-} ]]; then
    [[ -n ${JOBRULES_KWOK_BIN:-} ]] || JOBRULES_KWOK_BIN=$(bash tools/build.sh kwok | tail -n 1)
    [[ -n ${JOBRULES_TRAINING_OPERATOR_BIN:-} ]] ||
        JOBRULES_TRAINING_OPERATOR_BIN=$(bash tools/build.sh training-operator | tail -n 1)
    [[ -n ${JOBRULES_KUEUE_BIN:-} ]] || JOBRULES_KUEUE_BIN=$(bash tools/build.sh kueue | tail -n 1)
    export JOBRULES_KWOK_BIN JOBRULES_TRAINING_OPERATOR_BIN JOBRULES_KUEUE_BIN
fi
exec .venv/bin/python -m pytest "$@"
