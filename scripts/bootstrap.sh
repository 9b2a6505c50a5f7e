#!/usr/bin/env bash
# Create .venv with jobrules and its test dependencies. Idempotent and quick when done before.
# Extra extras as arguments: `bash scripts/bootstrap.sh mutation` adds mutmut (scripts/mutation.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x .venv/bin/python ]] || python3 -m venv .venv
extras=test
stamp=.venv/.jobrules-installed
for extra in "$@"; do extras+=",$extra"; stamp+="-$extra"; done
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".[$extras]"
    # devkit/ (the local control plane) is tooling, not part of the wheel: make it importable
    # from this venv the way the editable install makes the product importable.
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$PWD" > "$site/jobrules-devkit.pth"
    touch "$stamp"
fi
