"""Certificates made by openssl for the tests: a CA, a server's for 127.0.0.1, a client's."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
DAYS = "2"


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise RuntimeError("openssl is not installed: apt-get install openssl")
    subprocess.run([binary, *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Pki:
    """A CA and the certificates it signed, as PEM files in one directory."""

    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def sign(self, name: str, subject: str, extensions: str) -> tuple[Path, Path]:
        """A key and a certificate for `subject`, signed by the CA, with `extensions`."""
        where = self.ca.parent
        (where / f"{name}.ext").write_text(extensions + "\n")
        _openssl(
            "req",
            *KEY,
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            subject,
            cwd=where,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            self.ca.name,
            "-CAkey",
            self.ca_key.name,
            "-CAcreateserial",
            "-days",
            DAYS,
            "-out",
            f"{name}.crt",
            "-extfile",
            f"{name}.ext",
            cwd=where,
        )
        return where / f"{name}.crt", where / f"{name}.key"


def make_ca(where: Path, name: str = "ca") -> tuple[Path, Path]:
    where.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        "-x509",
        *KEY,
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.crt",
        "-days",
        DAYS,
        "-subj",
        f"/CN=sweeperd test {name}",
        cwd=where,
    )
    return where / f"{name}.crt", where / f"{name}.key"


def make_pki(where: Path) -> Pki:
    """A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate."""
    ca, ca_key = make_ca(where)
    pki = Pki(ca, ca_key, ca, ca, ca, ca)
    server = pki.sign(
        "server",
        "/CN=localhost",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth",
    )
    client = pki.sign("client", "/CN=sweeperd", "extendedKeyUsage=clientAuth")
    return Pki(ca, ca_key, *server, *client)
