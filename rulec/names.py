"""Kubernetes name syntax: what the API server would reject, said before it does."""
from __future__ import annotations

import re

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")


def key_problem(key: str) -> str | None:
    """Why `key` is not a valid label or annotation key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "the prefix before `/` is empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return ("the prefix must be a DNS subdomain: lower-case alphanumerics, `-` and `.`, "
                    "at most 253 characters")
    if not name:
        return "the name part is empty"
    if len(name) > 63:
        return f"the name part has {len(name)} characters; at most 63 are allowed"
    if not _NAME.fullmatch(name):
        return ("the name part must be alphanumerics, `-`, `_` and `.`, starting and ending "
                "alphanumeric")
    return None


def label_value_problem(value: str) -> str | None:
    if value == "":
        return None
    if len(value) > 63:
        return f"it has {len(value)} characters; at most 63 are allowed"
    if not _NAME.fullmatch(value):
        return "it must be alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric"
    return None


def dns_label_problem(name: str) -> str | None:
    if len(name) > 63:
        return f"it has {len(name)} characters; at most 63 are allowed"
    if not _DNS_LABEL.fullmatch(name):
        return "it must be lower-case alphanumerics and `-`, starting and ending alphanumeric"
    return None
