"""runtime/webhook/gunicorn_conf.py names only settings the installed gunicorn has.

gunicorn skips names of a config module it does not know, so a misspelt setting, or one this
gunicorn is too old for, would be ignored without a word.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gunicorn.config

CONF = Path(__file__).resolve().parents[4] / "runtime" / "webhook" / "gunicorn_conf.py"


def public_names() -> set[str]:
    """Module-level names (also under a module-level `if`), hooks included."""
    names: set[str] = set()
    statements = list(ast.parse(CONF.read_text(encoding="utf-8")).body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.If):
            statements += node.body + node.orelse
    return {n for n in names if not n.startswith("_")}


def test_every_public_name_is_a_gunicorn_setting() -> None:
    names = public_names()
    assert {"control_socket_disable", "ssl_context", "worker_tmp_dir"} <= names
    assert names - set(gunicorn.config.Config().settings) == set()
