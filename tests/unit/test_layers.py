"""Layering: the runtime reads plans and never imports the compiler or Lark; its pure core imports
no shell (the webhook's or the controller's) and no I/O framework; the compiler's stages never
import its commands (rulec.commands); no module of either imports itself through others; no
class of the compiler grows past what one reads at once; and both type-check."""
from __future__ import annotations

import ast
import importlib.metadata
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = sorted((ROOT / "runtime").rglob("*.py"))
RULEC = sorted((ROOT / "rulec").rglob("*.py"))
SHELLS = ("runtime.webhook", "runtime.controller")
FORBIDDEN = ("rulec", "lark")
IO_LIBRARIES = ("flask", "werkzeug", "gunicorn", "kubernetes", "urllib3", "prometheus_client")
# What a pure module may not import: the shells, and the libraries that do I/O for them.
IMPURE = (*SHELLS, *IO_LIBRARIES)
COMMANDS = ("rulec.commands",)
# The largest a class of the compiler may grow, in lines; the Lark transformer, a method per
# grammar rule, is read one rule at a time and stays whole.
CLASS_LINES = 400
WHOLE_CLASSES = {("rulec.lower", "_Lowering")}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of what `path` imports; `from a import b` also names `a.b` (b may be a
    module); relative imports are resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module(path).split(".")[:None if path.name == "__init__.py" else -1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


PURE = [p for p in RUNTIME if not _under(_module(p), SHELLS)]
# The compiler's library: every module but the command's shells and `python -m rulec`, which runs
# the command.
STAGES = [p for p in RULEC if not _under(_module(p), COMMANDS) and p.name != "__main__.py"]


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: str(p.relative_to(ROOT)))
def test_runtime_module_does_not_import_the_compiler(path: Path) -> None:
    bad = {n for n in _imports(path) if n.split(".")[0] in FORBIDDEN}
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_no_shell(path: Path) -> None:
    bad = {n for n in _imports(path) if _under(n, IMPURE)}
    assert not bad, f"{_module(path)} is pure but imports {sorted(bad)}"


def test_the_pure_core_is_most_of_the_runtime() -> None:
    assert {_module(p) for p in PURE} >= {
        "runtime.plan", "runtime.pods", "runtime.conditions", "runtime.evaluator",
        "runtime.state", "runtime.templates", "runtime.functions", "runtime.mutator.view",
        "runtime.mutator.draft", "runtime.mutator.steps", "runtime.mutator.inject",
        "runtime.patch", "runtime.admission", "runtime.registration", "runtime.vocabulary",
        "runtime.reloading", "runtime.evaluation.outcomes", "runtime.evaluation.ledger",
        "runtime.evaluation.occurrences", "runtime.evaluation.policies",
        "runtime.evaluation.decisions", "runtime.evaluation.budgets", "runtime.evaluation.verdicts",
        # the controller's decisions: what is watched and matters, one reconcile, the journal
        "runtime.projection", "runtime.watches", "runtime.store", "runtime.reconcile",
        "runtime.journal", "runtime.actions", "runtime.intents", "runtime.writeback",
        "runtime.objects", "runtime.workqueue", "runtime.shards"}


def test_mutator_layers_import_only_downwards() -> None:
    order = ["view", "draft", "steps", "inject"]
    for i, layer in enumerate(order):
        above = tuple(f"runtime.mutator.{name}" for name in order[i + 1:])
        imported = _imports(ROOT / "runtime" / "mutator" / f"{layer}.py")
        assert not {n for n in imported if _under(n, above)}, layer


@pytest.mark.parametrize("path", STAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_stage_never_imports_a_command(path: Path) -> None:
    bad = {n for n in _imports(path) if _under(n, COMMANDS)}
    assert not bad, f"{_module(path)} is a stage of the compiler but imports {sorted(bad)}"


def test_the_stages_and_the_commands_are_what_they_are_meant_to_be() -> None:
    stages = {_module(p) for p in STAGES}
    assert stages >= {
        "rulec", "rulec.source", "rulec.syntax", "rulec.lower", "rulec.nodes", "rulec.checker",
        "rulec.checks.context", "rulec.checks.names", "rulec.checks.kinds",
        "rulec.checks.filters", "rulec.checks.policies", "rulec.checks.injections",
        "rulec.checks.conflicts", "rulec.checks.schema_paths", "rulec.checks.values",
        "rulec.schema", "rulec.emit", "rulec.expr", "rulec.template", "rulec.fmt", "rulec.names",
        "rulec.manifests", "rulec.api", "rulec.diagnostics", "rulec.about"}
    assert {_module(p) for p in RULEC} - stages == {
        "rulec.__main__", "rulec.commands", "rulec.commands.cli", "rulec.commands.run",
        "rulec.commands.suite", "rulec.commands.inputs", "rulec.commands.junit",
        "rulec.commands.sarif", "rulec.commands.manifests", "rulec.commands.webhook_config",
        "rulec.commands.why", "rulec.commands.native"}


def test_the_checks_import_only_downwards() -> None:
    """The checker's topics (rulec/checks/), each layer importing only the layers below it, and
    none the checker that runs them."""
    layers = [["context"], ["values", "schema_paths", "names", "conflicts"], ["filters"],
              ["policies", "injections"], ["kinds"]]
    assert sorted(m for layer in layers for m in layer) == sorted(
        p.stem for p in (ROOT / "rulec" / "checks").glob("*.py") if p.stem != "__init__")
    graph = _graph(RULEC)
    for i, layer in enumerate(layers):
        below = {f"rulec.checks.{m}" for lower in layers[:i] for m in lower}
        for name in layer:
            imported = {m for m in graph[f"rulec.checks.{name}"]
                        if _under(m, ("rulec.checks", "rulec.checker"))}
            assert imported <= below, f"rulec.checks.{name} imports {sorted(imported - below)}"


def _graph(paths: list[Path]) -> dict[str, set[str]]:
    """Which of the modules at `paths` each of them imports: lazily (in a function) and for the
    type checker only as well, since either can hide a cycle. An import names the module that
    holds what it imports (`from a.b import C` names a.b); the packages a module lies in are
    left out (importing any module runs them first)."""
    modules = {_module(p): p for p in paths}

    def holder(name: str) -> str | None:
        parts = name.split(".")
        return next((m for m in (".".join(parts[:n]) for n in range(len(parts), 0, -1))
                     if m in modules), None)

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        named = {holder(n) for n in _imports(path)}
        graph[module] = {m for m in named if m is not None and not _under(module, (m,))}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of imports, as its strongly connected set of modules (Tarjan's algorithm,
    without recursion)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in order:
            continue
        work = [(root, iter(sorted(graph[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in order:
                    order[nxt] = low[nxt] = len(order)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in stack:
                    low[node] = min(low[node], order[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == order[node]:
                    members = stack[stack.index(node):]
                    del stack[stack.index(node):]
                    if len(members) > 1:
                        found.append(sorted(members))
    return found


def test_no_module_imports_itself_through_others() -> None:
    assert _cycles(_graph(RULEC + RUNTIME)) == []


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d", "f"}, "f": {"e"}}
    assert sorted(_cycles(graph)) == [["a", "b", "c"], ["e", "f"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_names_the_module_imported_from() -> None:
    graph = _graph(RULEC)
    assert {"rulec.checks.filters", "rulec.checks.policies", "rulec.nodes"} <= graph[
        "rulec.checks.kinds"]
    assert "rulec.checks" not in graph["rulec.checks.kinds"]   # a package it lies in
    assert "rulec.commands.sarif" in graph["rulec.commands.cli"]   # imported in a function


def _classes(path: Path) -> list[tuple[str, int]]:
    """Each class in `path` (nested ones too) and its length in lines, decorators included."""
    tree = ast.parse(path.read_text(), str(path))
    return [(node.name, node.end_lineno - min([node.lineno, *(d.lineno for d in
                                                                 node.decorator_list)]) + 1)
            for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            and node.end_lineno is not None]


def test_the_shells_never_import_each_other() -> None:
    """The webhook and the controller are two processes with two jobs: neither reaches into
    the other (what they share is in the pure core)."""
    for shell, other in (SHELLS, SHELLS[::-1]):
        for path in RUNTIME:
            if _under(_module(path), (shell,)):
                bad = {n for n in _imports(path) if _under(n, (other,))}
                assert not bad, f"{_module(path)} imports {sorted(bad)}"


def test_the_controller_shell_decides_nothing_the_core_does_not_say() -> None:
    """The worker reaches the decisions only through reconcile, the journal machine and the
    watches; it never calls the evaluator or the action steps itself."""
    imported = _imports(ROOT / "runtime" / "controller" / "worker.py")
    assert not {n for n in imported if _under(n, ("runtime.evaluator", "runtime.actions",
                                                    "runtime.evaluation", "runtime.pods"))}
    assert {"runtime.reconcile", "runtime.journal", "runtime.watches"} <= imported


def test_rulec_why_reads_as_the_controller_and_decides_nothing_itself() -> None:
    """`rulec why` reaches the API server only through the controller's transport (kube) and
    the rest of the runtime only through its pure core: nothing of the controller's process
    (worker, caches, informers, main), nor the webhook. Projection, pod selection, stored
    state and the decision it reaches only through the controller's own read path (watches,
    reconcile), never on its own; and no other part of the compiler talks to a cluster."""
    why = ROOT / "rulec" / "commands" / "why.py"
    imported = _imports(why)
    runtime = {n for n in imported if _under(n, ("runtime",))}
    pure = {_module(p) for p in PURE}
    shell = {n for n in runtime if _under(n, SHELLS)}
    assert shell <= {"runtime.controller", "runtime.controller.kube"}, shell
    assert {n for n in runtime - shell if n.rsplit(".", 1)[0] not in pure} <= pure, runtime
    assert {"runtime.reconcile", "runtime.watches"} <= runtime
    assert not {n for n in runtime if _under(n, (
        "runtime.projection", "runtime.pods", "runtime.state", "runtime.evaluation",
        "runtime.writeback", "runtime.store"))}
    process = tuple(f"runtime.controller.{m}" for m in (
        "kube", "worker", "caches", "informer", "main", "leader", "events", "serving", "health"))
    for path in RULEC:
        if path != why:
            bad = {n for n in _imports(path) if _under(n, process)}
            assert not bad, f"{_module(path)} imports {sorted(bad)}"


def test_rulec_why_loads_the_kubernetes_client_only_when_it_runs() -> None:
    assert _loaded_by_importing([ROOT / "rulec" / "commands" / "why.py"],
                                ("kubernetes", "runtime.controller")) == []


def test_no_class_of_the_runtime_is_over_400_lines() -> None:
    big = {f"{_module(p)}.{name}": n for p in RUNTIME for name, n in _classes(p) if n > CLASS_LINES}
    assert not big, f"classes over {CLASS_LINES} lines: {big}"


def test_no_class_of_the_compiler_is_over_400_lines() -> None:
    sizes = {(_module(p), name): lines for p in RULEC for name, lines in _classes(p)}
    assert WHOLE_CLASSES <= sizes.keys()
    big = {f"{m}.{name}": n for (m, name), n in sizes.items()
           if n > CLASS_LINES and (m, name) not in WHOLE_CLASSES}
    assert not big, f"classes over {CLASS_LINES} lines: {big}"


def test_relative_imports_are_resolved() -> None:
    assert "runtime.workqueue.Unfinished" in _imports(ROOT / "runtime" / "controller" / "metrics.py")
    assert _module(ROOT / "runtime" / "controller" / "__init__.py") == "runtime.controller"


def _loaded_by_importing(paths: list[Path], roots: tuple[str, ...]) -> list[str]:
    """What of `roots` is in sys.modules after importing `paths` in a fresh interpreter."""
    modules = [_module(p) for p in paths if p.name != "__main__.py"]   # those run a process
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"  # e.g. a config module that needs its environment
        "        pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if any(m == r or m.startswith(r + '.') "
        f"for r in {roots!r}))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_the_runtime_loads_neither_rulec_nor_lark() -> None:
    assert _loaded_by_importing(RUNTIME, FORBIDDEN) == []


def test_importing_the_pure_core_loads_no_shell_and_no_io_library() -> None:
    """Not even indirectly, through a module it imports."""
    assert _loaded_by_importing(PURE, IMPURE) == []


def test_importing_the_stages_loads_no_command_and_no_io_library() -> None:
    """Not even indirectly: the library runs without the command's shells."""
    assert _loaded_by_importing(STAGES, (*COMMANDS, *IO_LIBRARIES)) == []


def test_the_library_face_loads_each_name_when_used() -> None:
    script = (
        "import json, sys, rulec\n"
        "before = sorted(m for m in sys.modules if m.startswith('rulec.'))\n"
        "from rulec import api, diagnostics, emit, source\n"
        "homes = {'api': api, 'diagnostics': diagnostics, 'emit': emit, 'source': source}\n"
        "same = {n: getattr(rulec, n) is getattr(homes[rulec._HOMES[n].split('.')[1]], n)\n"
        "        for n in rulec.__all__}\n"
        "print(json.dumps([before, same]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    before, same = json.loads(proc.stdout)
    assert before == []
    assert same and all(same.values()), same
    assert {"build", "build_sources", "Build", "InputError", "Diagnostic", "dumps"} <= same.keys()


def test_compiler_and_plan_share_one_span_type_without_loading_the_plan() -> None:
    script = (
        "import sys, rulec.source\n"
        "print('runtime.plan' in sys.modules)\n"
        "import runtime.plan\n"
        "print(rulec.source.Span is runtime.plan.Span)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


def test_the_runtime_type_checks() -> None:
    """mypy with the configuration in pyproject.toml ([tool.mypy]) finds nothing, in the runtime
    and in the compiler."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert {"runtime", "rulec"} <= set(config["files"])
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_product_needs_no_control_plane_code() -> None:
    """The control-plane launcher is devkit's: nothing in the wheel imports it. The certificate
    library serves one module of the product, the self-managed serving certificate
    (runtime.certificates), so the webhook and the compiler never load it, and the wheel asks for
    it only with its `certs` extra."""
    product = sorted((ROOT / "rulec").rglob("*.py")) + RUNTIME
    bad = {_module(p): n for p in product for n in _imports(p) if _under(n, ("devkit",))}
    assert not bad
    users = {_module(p) for p in product for n in _imports(p) if _under(n, ("cryptography",))}
    assert users == {"runtime.certificates"}
    crypto = [r for r in importlib.metadata.requires("jobrules") or ()
              if r.lower().startswith("cryptography")]
    assert crypto and all("extra ==" in r for r in crypto), crypto   # never a plain requirement
    assert any('extra == "certs"' in r for r in crypto), crypto


def test_unit_tests_need_no_control_plane_launcher() -> None:
    """The unit tests read the CRDs through devkit.crds, never the launcher (devkit.cluster),
    and no helper of the integration tests is named like a module of the product."""
    unit = sorted((ROOT / "tests" / "unit").rglob("*.py"))
    bad = {str(p.relative_to(ROOT)) for p in unit if "devkit.cluster" in _imports(p)}
    assert not bad
    product = {p.stem for p in [*RULEC, *RUNTIME]}
    support = {p.stem for p in (ROOT / "tests" / "integration").rglob("*.py")
               if not p.name.startswith(("test_", "conftest"))}
    assert not support & product, support & product
