"""runtime.webhook.settings: the webhook's environment, read strictly."""

from __future__ import annotations

import pytest

from runtime.webhook.settings import Settings, SettingsError


def test_defaults() -> None:
    settings = Settings.from_env({"JOBRULES_PLAN": "/etc/jobrules/plan.json"})
    assert settings == Settings("/etc/jobrules/plan.json")
    assert settings.metrics == ("0.0.0.0", 9090)
    assert settings.max_body == 3 * 1024 * 1024


def test_every_variable() -> None:
    settings = Settings.from_env({
        "JOBRULES_PLAN": "p.json", "JOBRULES_TLS_CERT": "c.pem", "JOBRULES_TLS_KEY": "k.pem",
        "JOBRULES_BIND": "[::]:8443", "JOBRULES_METRICS_BIND": "[::1]:9100",
        "JOBRULES_WORKERS": "4", "JOBRULES_MAX_CONNECTIONS": "500",
        "JOBRULES_MAX_SILENT": "20000",
        "JOBRULES_CLIENT_TIMEOUT": "2.5", "JOBRULES_TIMEOUT": "10",
        "JOBRULES_GRACEFUL_TIMEOUT": "15", "JOBRULES_KEEPALIVE": "30",
        "JOBRULES_MAX_REQUESTS": "10000", "JOBRULES_MAX_REQUESTS_JITTER": "500",
        "JOBRULES_RELOAD_INTERVAL": "0.5", "JOBRULES_MAX_BODY": "1048576",
        "JOBRULES_LOG_LEVEL": "DEBUG",
    })
    assert settings == Settings("p.json", "c.pem", "k.pem", "[::]:8443", ("::1", 9100), 4, 500,
                                20000, 2.5, 10, 15, 30, 10000, 500, 0.5, 1048576, "debug")


def test_metrics_can_be_turned_off() -> None:
    assert Settings.from_env({"JOBRULES_PLAN": "p", "JOBRULES_METRICS_BIND": ""}).metrics is None


@pytest.mark.parametrize("env, message", [
    ({}, "JOBRULES_PLAN: required"),
    ({"JOBRULES_TLS_CERT": "c.pem"}, "give both or neither"),
    ({"JOBRULES_TLS_KEY": "k.pem"}, "give both or neither"),
    ({"JOBRULES_WORKERS": "two"}, "JOBRULES_WORKERS: expected an integer"),
    ({"JOBRULES_WORKERS": "0"}, "JOBRULES_WORKERS: must be at least 1"),
    ({"JOBRULES_MAX_CONNECTIONS": "0"}, "JOBRULES_MAX_CONNECTIONS: must be at least 1"),
    ({"JOBRULES_MAX_SILENT": "0"}, "JOBRULES_MAX_SILENT: must be at least 1"),
    ({"JOBRULES_CLIENT_TIMEOUT": "0"}, "JOBRULES_CLIENT_TIMEOUT: must be a finite number of seconds > 0"),
    ({"JOBRULES_CLIENT_TIMEOUT": "inf"}, "JOBRULES_CLIENT_TIMEOUT: must be a finite"),
    ({"JOBRULES_KEEPALIVE": "-1"}, "JOBRULES_KEEPALIVE: must be at least 0"),
    ({"JOBRULES_RELOAD_INTERVAL": "soon"}, "JOBRULES_RELOAD_INTERVAL: expected a number"),
    ({"JOBRULES_RELOAD_INTERVAL": "nan"}, "finite number"),
    ({"JOBRULES_RELOAD_INTERVAL": "-1"}, "finite number"),
    ({"JOBRULES_METRICS_BIND": "9090"}, "JOBRULES_METRICS_BIND: expected host:port"),
    ({"JOBRULES_METRICS_BIND": "host:99999"}, "JOBRULES_METRICS_BIND"),
    ({"JOBRULES_LOG_LEVEL": "loud"}, "JOBRULES_LOG_LEVEL: 'loud' is not one of"),
])
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    env = {"JOBRULES_PLAN": "p.json", **env} if env else env
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)
