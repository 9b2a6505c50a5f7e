"""runtime.controller.settings: the self-managed certificate's variables (both or neither,
NAMESPACE/NAME, the certs extra) and the defaults the manifests rely on."""

from __future__ import annotations

import sys

import pytest

from runtime.controller.settings import ControllerSettings, SettingsError

BASE = {"JOBRULES_PLAN": "/etc/jobrules/plan/plan.json", "JOBRULES_IDENTITY": "me"}


def test_no_certificate_is_managed_by_default() -> None:
    settings = ControllerSettings.from_env(BASE)
    assert (settings.webhook_secret, settings.webhook_service) == (None, None)
    assert settings.webhook_configuration == "0-jobrules"


def test_the_certificates_variables() -> None:
    settings = ControllerSettings.from_env({
        **BASE, "JOBRULES_WEBHOOK_SECRET": "infra/jobrules-webhook-tls",
        "JOBRULES_WEBHOOK_SERVICE": "infra/jobrules-webhook",
        "JOBRULES_WEBHOOK_CONFIGURATION": "my-jobrules"})
    assert settings.webhook_secret == ("infra", "jobrules-webhook-tls")
    assert settings.webhook_service == ("infra", "jobrules-webhook")
    assert settings.webhook_configuration == "my-jobrules"


@pytest.mark.parametrize("env, message", [
    ({"JOBRULES_WEBHOOK_SECRET": "infra/tls"}, "both or neither"),
    ({"JOBRULES_WEBHOOK_SERVICE": "infra/svc"}, "both or neither"),
    ({"JOBRULES_WEBHOOK_SECRET": "tls", "JOBRULES_WEBHOOK_SERVICE": "infra/svc"},
     "JOBRULES_WEBHOOK_SECRET='tls': expected NAMESPACE/NAME"),
    ({"JOBRULES_WEBHOOK_SECRET": "infra/tls", "JOBRULES_WEBHOOK_SERVICE": "Infra/svc"},
     "JOBRULES_WEBHOOK_SERVICE='Infra/svc': expected NAMESPACE/NAME"),
    ({"JOBRULES_WEBHOOK_SECRET": "a/b/c", "JOBRULES_WEBHOOK_SERVICE": "infra/svc"},
     "expected NAMESPACE/NAME"),
])
def test_bad_certificates_variables(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        ControllerSettings.from_env({**BASE, **env})


def test_self_managed_certificates_need_the_certs_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the cryptography package (an import of it fails, as when it is not installed)
    the mode is refused at start, naming the extra, rather than failing once leading."""
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(SettingsError, match=r"pip install 'jobrules\[certs\]'"):
        ControllerSettings.from_env({**BASE, "JOBRULES_WEBHOOK_SECRET": "infra/tls",
                                     "JOBRULES_WEBHOOK_SERVICE": "infra/svc"})
    assert ControllerSettings.from_env(BASE).webhook_secret is None   # other modes need nothing


def test_the_policies_put_in_audit() -> None:
    env = {"JOBRULES_PLAN": "p.json", "JOBRULES_AUDIT": " trainer/retry, vcjob ,,"}
    assert ControllerSettings.from_env(env).audit == ("trainer/retry", "vcjob")
    assert ControllerSettings.from_env({"JOBRULES_PLAN": "p.json"}).audit == ()


def test_shards() -> None:
    assert ControllerSettings.from_env(BASE).shards == 1
    assert ControllerSettings.from_env({**BASE, "JOBRULES_SHARDS": "8"}).shards == 8
    for value, message in (("0", "must be at least 1"), ("x", "expected an integer")):
        with pytest.raises(SettingsError, match=f"JOBRULES_SHARDS: {message}"):
            ControllerSettings.from_env({**BASE, "JOBRULES_SHARDS": value})
    with pytest.raises(SettingsError, match="JOBRULES_LEADER_ELECT=true"):
        ControllerSettings.from_env({**BASE, "JOBRULES_SHARDS": "2",
                                     "JOBRULES_LEADER_ELECT": "false"})
