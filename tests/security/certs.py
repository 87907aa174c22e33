"""Throw-away certificates for TLS tests, made with ``cryptography``."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Pem:
    cert: bytes
    key: bytes

    def write(self, folder: Path, name: str) -> tuple[Path, Path]:
        cert, key = folder / f"{name}.crt", folder / f"{name}.key"
        cert.write_bytes(self.cert)
        key.write_bytes(self.key)
        return cert, key


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _builder(
    subject: str, issuer: str, public: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


class Ca:
    def __init__(self, name: str = "tiermem test CA") -> None:
        self.name = name
        self._key = _key()
        cert = (
            _builder(name, name, self._key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.pem = Pem(cert.public_bytes(serialization.Encoding.PEM), _pem_key(self._key))

    def issue(self, common_name: str, *, server: bool) -> Pem:
        key = _key()
        builder = _builder(common_name, self.name, key.public_key()).add_extension(
            x509.BasicConstraints(ca=False, path_length=None), critical=True
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(self._key, hashes.SHA256())
        return Pem(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))

    def mutual_tls(self, folder: Path) -> tuple[dict[str, str], Path]:
        """``security.tls`` for a daemon that serves TLS with a certificate this CA
        issued and requires client certificates it signed; and the CA file."""
        cert, key = self.issue("localhost", server=True).write(folder, "server")
        ca_file = folder / "ca.crt"
        ca_file.write_bytes(self.pem.cert)
        tls = {"cert_file": str(cert), "key_file": str(key), "client_ca_file": str(ca_file)}
        return tls, ca_file
