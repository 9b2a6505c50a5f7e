"""The webhook's serving certificate when the controller manages it: pure decisions, no I/O.

What the TLS Secret should hold and what the webhook configuration's caBundle should be, given
what they hold now and the time. Each issue makes a new CA and a certificate signed by it, and
throws the CA's key away: no key that can sign is ever stored. A renewal therefore changes the
CA, so the caBundle carries the new CA and the previous ones for `OVERLAP` after the new
certificate is issued (long enough for the kubelet to update the mounted Secret and for the
webhook to reload it), then the current one only.

A certificate is replaced when it is missing or unreadable, its key does not match it, the CA
beside it did not sign it, it is not for the names the API server calls, it is not valid yet, or
it expires within `RENEW_BEFORE` (cert-controller's defaults: one year, renewed 90 days early).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = timedelta(days=365)
RENEW_BEFORE = timedelta(days=90)
OVERLAP = timedelta(minutes=10)     # the previous CAs stay trusted this long after a renewal
BACKDATE = timedelta(minutes=5)     # notBefore this far back: clocks a little behind accept it
CA_NAME = "jobrules-webhook-ca"
CERT, KEY, CA = "tls.crt", "tls.key", "ca.crt"   # the Secret's keys (kubernetes.io/tls's, and cert-manager's CA)


@dataclass(frozen=True, slots=True)
class Serving:
    """What the Secret holds: the certificate, its key and the CA that signed it (PEM)."""

    cert: bytes
    key: bytes
    ca: bytes

    def data(self) -> dict[str, bytes]:
        return {CERT: self.cert, KEY: self.key, CA: self.ca}

    @classmethod
    def of(cls, data: dict[str, bytes]) -> Serving | None:
        """From a Secret's decoded data; None when a key is missing or empty."""
        parts = [data.get(k) for k in (CERT, KEY, CA)]
        return cls(*parts) if all(parts) else None   # type: ignore[arg-type]


def problem(current: Serving | None, names: tuple[str, ...], now: datetime) -> str | None:
    """Why `current` must be replaced, or None when it serves `names` long enough yet."""
    if current is None:
        return "no certificate yet"
    try:
        cert = x509.load_pem_x509_certificate(current.cert)
        key = serialization.load_pem_private_key(current.key, None)
        ca = x509.load_pem_x509_certificate(current.ca)
    except ValueError as err:
        return f"the certificate, key or CA cannot be read ({err})"
    if key.public_key() != cert.public_key():
        return "the key is not the certificate's"
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "the CA beside it did not sign it"
    if sorted(_names(cert)) != sorted(names):
        return f"it is for {', '.join(sorted(_names(cert)))}, not {', '.join(sorted(names))}"
    if now < cert.not_valid_before_utc:
        return f"it is not valid before {cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ}"
    if cert.not_valid_after_utc - now <= RENEW_BEFORE:
        return f"it expires at {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    return None


def issue(names: tuple[str, ...], now: datetime) -> Serving:
    """A new CA and a certificate for `names` signed by it (ECDSA P-256, `VALIDITY` long); the
    CA's key is dropped."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    ca = (_builder(ca_name, ca_name, ca_key.public_key(), now)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(_usage(cert_sign=True), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    cert = (_builder(subject, ca_name, key.public_key(), now)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return Serving(cert.public_bytes(serialization.Encoding.PEM),
                   key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()),
                   ca.public_bytes(serialization.Encoding.PEM))


def ca_bundle(current: Serving, bundle: bytes, now: datetime) -> bytes:
    """The caBundle for `current`: its CA first, then the other CAs of `bundle` (in their
    order) while `current` is younger than OVERLAP, so that webhook replicas still serving the
    certificate before it stay trusted until they have reloaded."""
    ours = _pems(current.ca)
    keep = now < issued_at(current) + OVERLAP
    others = [p for p in dict.fromkeys(_pems(bundle)) if p not in ours] if keep else []
    return b"".join(ours + others)


def issued_at(current: Serving) -> datetime:
    return x509.load_pem_x509_certificate(current.cert).not_valid_before_utc + BACKDATE


def next_look(current: Serving, now: datetime) -> timedelta:
    """How long until something may change by time alone: the end of the overlap, or renewal."""
    cert = x509.load_pem_x509_certificate(current.cert)
    moments = [t for t in (issued_at(current) + OVERLAP, cert.not_valid_after_utc - RENEW_BEFORE)
               if t > now]
    return min(moments) - now if moments else timedelta(0)


def expiry(current: Serving) -> datetime:
    return x509.load_pem_x509_certificate(current.cert).not_valid_after_utc


def _pems(bundle: bytes) -> list[bytes]:
    """The certificates of a PEM bundle, each re-encoded (so equal certificates compare equal);
    what is not a certificate is dropped."""
    try:
        found = x509.load_pem_x509_certificates(bundle) if bundle.strip() else []
    except ValueError:
        return []
    return [c.public_bytes(serialization.Encoding.PEM) for c in found]


def _names(cert: x509.Certificate) -> list[str]:
    try:
        return cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        return []


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             now: datetime) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE).not_valid_after(now - BACKDATE + VALIDITY))


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
                         crl_sign=cert_sign, encipher_only=False, decipher_only=False)
