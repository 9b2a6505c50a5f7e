"""Reading settings from `JOBRULES_*` environment variables, strictly.

The webhook's and the controller's settings read the same kinds of values; a bad one is a
SettingsError that names the variable, so a process stops at start with a message saying what
to fix rather than running with a guess.
"""

from __future__ import annotations

from collections.abc import Mapping


class SettingsError(ValueError):
    """An environment variable with a value the process cannot use."""


def integer(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name}: must be at least {minimum}, got {value}")
    return value


def seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected a number of seconds, got {raw!r}") from None
    if not 0 <= value < float("inf"):
        raise SettingsError(f"{name}: must be a finite number of seconds >= 0, got {raw!r}")
    return value


def choice(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = (env.get(name) or default).lower()
    if value not in allowed:
        raise SettingsError(f"{name}: {value!r} is not one of {', '.join(allowed)}")
    return value


def boolean(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name}: expected true or false, got {raw!r}")


def host_port(env: Mapping[str, str], name: str,
              default: tuple[str, int] | None) -> tuple[str, int] | None:
    """`host:port` (IPv6 hosts in brackets); empty: disabled."""
    raw = env.get(name)
    if raw is None:
        return default
    if raw == "":
        return None
    host, sep, port = raw.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingsError(f"{name}: expected host:port or empty, got {raw!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def kubeconfig(env: Mapping[str, str]) -> str | None:
    """The kubeconfig the controller (and `rulec why`, which reads as it does) talks to the API
    server with: `JOBRULES_KUBECONFIG`, else `KUBECONFIG`; None means in-cluster."""
    return env.get("JOBRULES_KUBECONFIG") or env.get("KUBECONFIG") or None
