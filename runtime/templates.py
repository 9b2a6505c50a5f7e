"""Rendering plan templates (literal strings, `{placeholder}`s and embedded JMESPath).

One renderer for every place a template stands (verdict reasons and messages, count values,
pod-selector labels, policy messages, injected values), so they all follow docs/plan.md: a
template that is a single expression keeps its JSON value; anything else is stringified and
joined.

Expressions are searched through a `Search`: the evaluator's reads a failing expression as null
and notes the problem; admission's turns it into the injection's failure. Everything else about
reading a value is the same for both.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import jmespath
import jmespath.exceptions

from runtime import plan

# An expression's value over some data, with the caller's policy for run-time errors.
Search = Callable[[plan.Expr, Any], Any]
# Called with (expression, error) when an expression fails at run time.
OnError = Callable[[plan.Expr, Exception], None]

# What a search may raise on odd data: jmespath's own errors, and the plain TypeError and
# ValueError its functions raise on some values (any object or pod may be odd).
SEARCH_ERRORS = (jmespath.exceptions.JMESPathError, TypeError, ValueError)


def searcher(options: jmespath.Options, on_error: OnError | None = None) -> Search:
    """A Search that reads a failing expression as null, after telling `on_error`."""
    def search(expr: plan.Expr, data: Any) -> Any:
        try:
            return expr.compiled.search(data, options)
        except SEARCH_ERRORS as err:
            if on_error is not None:
                on_error(expr, err)
            return None
    return search


def text(value: Any) -> str:
    """How a value reads inside a string: null is empty, strings as is, the rest compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def render(template: plan.Template, data: Any, variables: Mapping[str, Any],
           search: Search) -> Any:
    """The template's value: a lone expression keeps its JSON value, else the joined string."""
    if len(template) == 1 and isinstance(template[0], plan.Expr):
        return search(template[0], data)
    out: list[str] = []
    for part in template:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, plan.Var):
            out.append(text(variables.get(part.name)))
        else:
            out.append(text(search(part, data)))
    return "".join(out)


def render_text(template: plan.Template | None, data: Any, variables: Mapping[str, Any],
                search: Search) -> str | None:
    """A template as a string (reasons, messages, label values); None when absent or null."""
    if template is None:
        return None
    value = render(template, data, variables, search)
    return None if value is None else text(value)
