"""Rendering plan templates (literal strings, `{placeholder}`s and embedded JMESPath).

One renderer for every place a template stands (verdict reasons and messages, count values,
pod-selector labels, policy messages), so they all follow docs/plan.md: a template that is a
single expression keeps its JSON value; anything else is stringified and joined.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import jmespath
import jmespath.exceptions

from runtime import plan

# Called with (expression, error) when an expression fails at run time; the value is then null.
OnError = Callable[[plan.Expr, Exception], None]


def search(expr: plan.Expr, data: Any, options: jmespath.Options, on_error: OnError | None = None) -> Any:
    """Search a compiled expression; a run-time error (bad argument types) yields null."""
    try:
        return expr.compiled.search(data, options)
    except jmespath.exceptions.JMESPathError as err:
        if on_error is not None:
            on_error(expr, err)
        return None


def text(value: Any) -> str:
    """How a value reads inside a string: null is empty, strings as is, the rest compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def render(template: plan.Template, data: Any, variables: Mapping[str, Any],
           options: jmespath.Options, on_error: OnError | None = None) -> Any:
    """The template's value: a lone expression keeps its JSON value, else the joined string."""
    if len(template) == 1 and isinstance(template[0], plan.Expr):
        return search(template[0], data, options, on_error)
    out: list[str] = []
    for part in template:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, plan.Var):
            out.append(text(variables.get(part.name)))
        else:
            out.append(text(search(part, data, options, on_error)))
    return "".join(out)


def render_text(template: plan.Template | None, data: Any, variables: Mapping[str, Any],
                options: jmespath.Options, on_error: OnError | None = None) -> str | None:
    """A template as a string (reasons, messages, label values); None when absent or null."""
    if template is None:
        return None
    value = render(template, data, variables, options, on_error)
    return None if value is None else text(value)
