#!/usr/bin/env bash
# Create .venv with jobrules and its test dependencies. Idempotent and quick when done before.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x .venv/bin/python ]] || python3 -m venv .venv
stamp=.venv/.jobrules-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[test]'
    touch "$stamp"
fi
