#!/usr/bin/env bash
# Mutation testing (mutmut) of the pure core, one module at a time, each against the unit tests
# that matter for it. Not run in CI (minutes to tens of minutes a module on 2 cores): see
# docs/testing.md.
#
#   bash scripts/mutation.sh [MODULE...]     run (default: every module below), then report
#   bash scripts/mutation.sh --report [MODULE...]   report the last run's results only
#   bash scripts/mutation.sh --list          the modules, what each mutates and the tests it runs
#
# Per module it prints mutants killed / survived / timed out / without tests, and each survivor
# (mutant id, file:line and the change in one line); survivors listed with a reason in
# scripts/mutation-equivalent.txt are counted apart as equivalent. State lives in .mutation/MODULE/
# (git-ignored): results are kept between runs, a mutant is tested again when its function
# changes, and every mutant not killed last time is tested again (so a new test shows at once).
# MUTATION_JOBS sets the worker processes (default 1: the machines are shared).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# MODULE -> the files it mutates (fnmatch patterns, relative to the checkout)
declare -A MUTATE=(
    [evaluator]="runtime/evaluator.py runtime/evaluation/*.py"
    [conditions]="runtime/conditions.py"
    [pods]="runtime/pods.py"
    [state]="runtime/state.py"
    [intents]="runtime/intents.py"
    [reconcile]="runtime/reconcile.py"
    [writeback]="runtime/writeback.py"
    [actions]="runtime/actions.py"
    [journal]="runtime/journal.py"
    [mutator]="runtime/mutator/*.py"
    [patch]="runtime/patch.py"
    [admission]="runtime/admission.py"
    [templates]="runtime/templates.py"
    [functions]="runtime/functions.py"
    [checker]="rulec/checker.py rulec/checks/*.py"
    [lower]="rulec/lower.py"
    [expr]="rulec/expr.py"
    [emit]="rulec/emit.py"
    [resources]="runtime/resources.py"
)
ORDER=(evaluator conditions pods journal reconcile writeback mutator admission
       state intents actions patch templates functions checker lower expr emit resources)

# The unit tests each module runs against: its own and those that read its answers. Left
# out: the oracle's differential tests (a Go harness, a minute each), the integration tests,
# the evaluator's slow property tests (test_evaluator_props.py, test_remembered.py: 20-40 s
# for each mutant that survives the rest).
u=tests/unit
rt=$u/runtime
eval_tests="$rt/test_evaluator.py $rt/test_evaluator_holds.py $rt/test_evaluator_policies.py
    $rt/test_evaluator_offers.py $rt/test_occurrences.py $rt/test_evaluator_causes.py $rt/test_foreign.py
    $rt/test_state.py $u/test_pod_failure_policy.py $u/test_rules_shipped_verdicts.py $u/test_examples.py"
controller_tests="$rt/test_reconcile.py $rt/test_writeback.py $rt/test_journal.py $rt/test_actions.py
    $rt/controller/test_worker.py $rt/controller/test_replay.py $rt/controller/test_controller_causes.py
    $rt/test_kueue_restart.py $rt/test_crashloop_oom.py $rt/test_resize.py"
mutator_tests="$rt/mutator $rt/test_admission.py $rt/test_pod_reading.py"
rulec_tests="$u/rulec/test_checker.py $u/rulec/test_checker_fuzz.py $u/rulec/test_diagnostics.py
    $u/rulec/test_syntax.py $u/rulec/test_emit.py $u/rulec/test_language_docs.py $u/test_rules_shipped.py
    $u/test_readme.py $u/rulec/test_guarded_recipes.py"
# the checker's topic files: each finding said whole (tests/unit/rulec/said.py)
checker_tests="$u/rulec/test_checker_policies.py $u/rulec/test_checker_schema_paths.py
    $u/rulec/test_checker_injections.py $u/rulec/test_checker_conflicts.py
    $u/rulec/test_checker_kinds.py $u/rulec/test_checker_names.py $u/rulec/test_checker_filters.py
    $u/rulec/test_checker_causes.py $u/rulec/test_checker_allow.py"
declare -A TESTS=(
    [evaluator]="$eval_tests"
    [conditions]="$rt/test_conditions.py $eval_tests $rt/test_pods.py"
    [pods]="$rt/test_pods.py $rt/test_pod_reading.py $eval_tests"
    [state]="$eval_tests $controller_tests"
    [intents]="$rt/test_intents.py $controller_tests"
    [reconcile]="$controller_tests $rt/test_shadow.py $rt/test_foreign.py"
    [writeback]="$controller_tests $rt/test_shadow.py"
    [actions]="$controller_tests"
    [journal]="$controller_tests"
    [mutator]="$mutator_tests $u/test_examples.py"
    [patch]="$rt/test_patch.py $mutator_tests"
    [admission]="$rt/test_admission.py $rt/webhook/test_webhook_worker.py $rt/webhook/test_webhook_app.py"
    [templates]="$rt/test_pods.py $eval_tests $mutator_tests"
    [functions]="$rt/test_functions.py $rt/test_pods.py $eval_tests $rt/test_reconcile.py"
    [checker]="$rulec_tests $checker_tests"
    [lower]="$rulec_tests $u/rulec/test_fmt.py"
    [expr]="$rulec_tests"
    [emit]="$rulec_tests $u/test_examples.py $u/rulec/test_native_plan.py $u/rulec/test_native.py
        $rt/test_evaluator_causes.py"
    [resources]="$rt/test_resources.py $rt/test_resize.py"
)

mode=run
case ${1:-} in
    --list)
        for m in "${ORDER[@]}"; do
            printf '%s\n  mutates: %s\n  tests:   %s\n' "$m" "${MUTATE[$m]}" "$(echo ${TESTS[$m]})"
        done
        exit 0 ;;
    --report) mode=report; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
esac
modules=("$@")
[[ ${#modules[@]} -gt 0 ]] || modules=("${ORDER[@]}")
for m in "${modules[@]}"; do
    [[ -n ${MUTATE[$m]:-} ]] || { echo "unknown module '$m' (one of: ${ORDER[*]})" >&2; exit 2; }
done

bash scripts/bootstrap.sh mutation
py=$root/.venv/bin/python
jobs=${MUTATION_JOBS:-1}

lines() { printf '    %s\n' "$@"; }

# A work folder per module: the checkout's folders linked in, and mutmut's settings for this
# module (mutmut reads setup.cfg from where it runs and keeps its mutants/ there).
prepare() {
    local m=$1 dir=$root/.mutation/$1
    mkdir -p "$dir"
    for f in runtime rulec tests rules examples grammar docs devkit bench tools README.md pyproject.toml \
             .pre-commit-hooks.yaml; do
        ln -sfn "$root/$f" "$dir/$f"
    done
    # Hypothesis as the tests have it, but reproducible and with no deadline (a mutant's
    # trampolines slow every call: a missed deadline would read as a kill).
    # The caches emptied at each session's start: mutmut forks each mutant's tests from a process
    # that ran them on the original code, so a cache (`occurrences._matters`'s lru_cache) would
    # answer with the original's results and hide every mutant of the functions it calls.
    cat > "$dir/conftest.py" <<'EOF'
import sys

from hypothesis import settings

settings.register_profile("mutation", deadline=None, derandomize=True, database=None)
settings.load_profile("mutation")


def pytest_sessionstart(session):
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("runtime.", "rulec.")):
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and callable(value):
                clear()
EOF
    # shellcheck disable=SC2086
    {
        echo "[mutmut]"
        echo "source_paths ="; lines runtime rulec
        echo "only_mutate ="; lines ${MUTATE[$m]}
        echo "also_copy ="; lines conftest.py rules examples grammar docs devkit bench tools README.md \
            .pre-commit-hooks.yaml
        echo "pytest_add_cli_args_test_selection ="; lines ${TESTS[$m]}
        echo "pytest_add_cli_args ="; lines -p no:cacheprovider
        echo "use_git_change_detection = false"
        # A loop: (tests' time + 5 s) x 5 of wall clock (x10 CPU); load is no loop
        echo "timeout_multiplier = 5"
        echo "timeout_constant = 5"
    } > "$dir/setup.cfg.new"
    mv "$dir/setup.cfg.new" "$dir/setup.cfg"
    # mutmut copies the files under source_paths that are not Python (the grammar) only when it
    # first makes mutants/: copy them again, or a later run reads an old grammar beside new rules.
    if [[ -d $dir/mutants ]]; then
        (cd "$root" && find runtime rulec \( -type f -o -type l \) ! -name '*.py' ! -path '*/__pycache__/*' \
            -exec cp -L --parents {} "$dir/mutants/" \;)
    fi
}

# mutmut picks the mutant of a run by an environment variable, not by changing the files, so an
# answer `rulec check` kept on disk (keyed by the files) would hide every mutant: no caches.
export RULEC_NO_CACHE=1
for m in "${modules[@]}"; do
    dir=$root/.mutation/$m
    prepare "$m"
    if [[ $mode == run ]]; then
        echo "== $m: mutmut run (${MUTATE[$m]})"
        # Mutants not killed last time, to test again after the run (a run keeps old results).
        mapfile -t again < <(cd "$dir" && "$py" "$root/scripts/mutation_report.py" pending)
        (cd "$dir" && "$py" -m mutmut run --max-children "$jobs") > "$dir/run.log" 2>&1 ||
            { tail -n 40 "$dir/run.log"; echo "mutmut failed for $m (log: $dir/run.log)" >&2; exit 1; }
        if [[ ${#again[@]} -gt 0 ]]; then
            mapfile -t again < <(cd "$dir" && "$py" "$root/scripts/mutation_report.py" pending "${again[@]}")
        fi
        if [[ ${#again[@]} -gt 0 ]]; then
            echo "   testing again ${#again[@]} mutants not killed last time"
            (cd "$dir" && "$py" -m mutmut run --max-children "$jobs" "${again[@]}") >> "$dir/run.log" 2>&1 ||
                { tail -n 40 "$dir/run.log"; echo "mutmut failed for $m (log: $dir/run.log)" >&2; exit 1; }
        fi
    fi
    (cd "$dir" && "$py" "$root/scripts/mutation_report.py" report "$m" "$root/scripts/mutation-equivalent.txt")
done
