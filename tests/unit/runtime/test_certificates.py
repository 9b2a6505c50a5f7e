"""runtime.certificates: when the self-managed serving certificate is replaced, what a new one is,
and which CAs the webhook configuration trusts, at each boundary of time."""

from __future__ import annotations

import ssl
import threading
import socket
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from runtime import certificates as c

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
NAMES = ("jobrules-webhook", "jobrules-webhook.infra.svc", "jobrules-webhook.infra.svc.cluster.local")


@pytest.fixture(scope="module")
def current() -> c.Serving:
    return c.issue(NAMES, NOW)


@pytest.fixture(scope="module")
def other() -> c.Serving:
    return c.issue(NAMES, NOW)


def cert(serving: c.Serving) -> x509.Certificate:
    return x509.load_pem_x509_certificate(serving.cert)


def test_a_new_certificate_serves_the_names_for_a_year_signed_by_a_ca_beside_it(current: c.Serving) -> None:
    leaf, ca = cert(current), x509.load_pem_x509_certificate(current.ca)
    leaf.verify_directly_issued_by(ca)
    assert leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value \
        .get_values_for_type(x509.DNSName) == list(NAMES)
    assert leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert leaf.not_valid_before_utc == NOW - c.BACKDATE
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc == c.VALIDITY
    assert c.issued_at(current) == NOW and c.expiry(current) == NOW - c.BACKDATE + c.VALIDITY
    assert b"PRIVATE KEY" in current.key and b"PRIVATE KEY" not in current.ca


def test_each_issue_is_a_new_ca(current: c.Serving, other: c.Serving) -> None:
    assert current.ca != other.ca and current.key != other.key


def test_python_ssl_serves_it_and_a_client_trusting_the_ca_accepts_it(current: c.Serving,
                                                                       tmp_path: Path) -> None:
    """The webhook serves it with the standard library's TLS: a handshake on loopback."""
    (tmp_path / "tls.crt").write_bytes(current.cert)
    (tmp_path / "tls.key").write_bytes(current.key)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_context = ssl.create_default_context(cadata=current.ca.decode())
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def accept() -> None:
            conn, _ = listener.accept()
            with server_context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")

        thread = threading.Thread(target=accept)
        thread.start()
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                client_context.wrap_socket(raw, server_hostname=NAMES[1]) as tls:
            assert tls.recv(2) == b"ok"
        thread.join()


# ---------------------------------------------------------------------------------------------
# When it is replaced


def test_a_good_certificate_is_kept(current: c.Serving) -> None:
    assert c.problem(current, NAMES, NOW) is None


@pytest.mark.parametrize("offset, kept", [
    (-c.BACKDATE - timedelta(seconds=1), False),                     # before notBefore
    (-c.BACKDATE, True),
    (c.VALIDITY - c.BACKDATE - c.RENEW_BEFORE - timedelta(seconds=1), True),
    (c.VALIDITY - c.BACKDATE - c.RENEW_BEFORE, False),               # renewal due
    (c.VALIDITY, False),                                             # expired
])
def test_renewal_is_due_before_expiry(current: c.Serving, offset: timedelta, kept: bool) -> None:
    assert (c.problem(current, NAMES, NOW + offset) is None) == kept


def test_each_reason_for_a_new_one(current: c.Serving, other: c.Serving) -> None:
    cases = {
        "no certificate yet": None,
        "cannot be read": c.Serving(b"garbage", current.key, current.ca),
        "the key is not the certificate's": c.Serving(current.cert, other.key, current.ca),
        "the CA beside it did not sign it": c.Serving(current.cert, current.key, other.ca),
    }
    for expected, serving in cases.items():
        assert expected in (c.problem(serving, NAMES, NOW) or ""), expected
    assert c.problem(current, ("jobrules-webhook.other.svc",), NOW) == (
        f"it is for {', '.join(sorted(NAMES))}, not jobrules-webhook.other.svc")
    # The names' order does not matter.
    assert c.problem(current, tuple(reversed(NAMES)), NOW) is None


@pytest.mark.parametrize("data, expected", [
    ({}, None),
    ({"tls.crt": b"a", "tls.key": b"b"}, None),
    ({"tls.crt": b"a", "tls.key": b"b", "ca.crt": b""}, None),
    ({"tls.crt": b"a", "tls.key": b"b", "ca.crt": b"c"}, c.Serving(b"a", b"b", b"c")),
])
def test_serving_of_a_secrets_data(data: dict[str, bytes], expected: c.Serving | None) -> None:
    assert c.Serving.of(data) == expected
    if expected is not None:
        assert expected.data() == data


# ---------------------------------------------------------------------------------------------
# The caBundle


def test_the_bundle_trusts_the_new_ca_and_the_old_ones_for_the_overlap(current: c.Serving,
                                                                        other: c.Serving) -> None:
    old = other.ca + b"\n"            # formatting noise is no difference
    assert c.ca_bundle(current, b"", NOW) == current.ca
    assert c.ca_bundle(current, old, NOW) == current.ca + other.ca
    assert c.ca_bundle(current, old, NOW + c.OVERLAP - timedelta(seconds=1)) == current.ca + other.ca
    assert c.ca_bundle(current, old, NOW + c.OVERLAP) == current.ca
    # Already first, duplicates, and what is not a certificate.
    assert c.ca_bundle(current, current.ca + other.ca + other.ca, NOW) == current.ca + other.ca
    assert c.ca_bundle(current, b"not a pem", NOW) == current.ca


@pytest.mark.parametrize("offset, expected", [
    (timedelta(0), c.OVERLAP),
    (c.OVERLAP, c.VALIDITY - c.BACKDATE - c.RENEW_BEFORE - c.OVERLAP),
    (c.VALIDITY, timedelta(0)),
])
def test_next_look(current: c.Serving, offset: timedelta, expected: timedelta) -> None:
    assert c.next_look(current, NOW + offset) == expected
