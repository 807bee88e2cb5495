"""The CNCF distribution registry (Debian's ``docker-registry``) on 127.0.0.1 for the tests: TLS with a
certificate made here (its CA is what the agent is told to trust) and htpasswd (bcrypt) auth."""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import shutil
import socket
import ssl
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from local_servers import serving

USER, PASSWORD = "publisher", "s3cret-for-tests"


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT
    ca: Path  # the CA file to trust
    config: Path  # a docker config.json with the test user's credentials
    basic: Path  # a folder with username and password files (a basic-auth Secret mounted)
    data: Path  # the registry's storage (a test may tamper with a blob here)

    def url(self, repo: str) -> str:
        return f"oci://{self.host}/{repo}"

    def blob_path(self, digest: str) -> Path:
        hexd = digest.removeprefix("sha256:")
        return self.data / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"


def _certificate(folder: Path, address: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for ``address`` (it is its own CA)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tritonops test registry")])
    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    crt, pem = folder / "registry.crt", folder / "registry.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return crt, pem


def _bcrypt(password: str) -> str:
    """A bcrypt hash ($2b$) from the C library's crypt(3) (libxcrypt), the one htpasswd -B would write."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))  # cost 4: the registry checks it per request


def _free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(folder: Path, address: str = "127.0.0.1") -> Iterator[Registry]:
    """The registry on ``address`` (the kube-play test: the Podman bridge's gateway, which its pods reach)."""
    exe = shutil.which("docker-registry")
    if exe is None:
        raise RuntimeError("docker-registry is not installed (apt-get install docker-registry; make apt)")
    crt, key = _certificate(folder, address)
    (folder / "htpasswd").write_text(f"{USER}:{_bcrypt(PASSWORD)}\n")
    port = _free_port(address)
    host = f"{address}:{port}"
    config = {"version": 0.1, "log": {"level": "error", "accesslog": {"disabled": True}},
              "storage": {"filesystem": {"rootdirectory": str(folder / "data")}, "delete": {"enabled": True}},
              "http": {"addr": host, "secret": "tests-only", "tls": {"certificate": str(crt), "key": str(key)}},
              "auth": {"htpasswd": {"realm": "tritonops-tests", "path": str(folder / "htpasswd")}}}
    (folder / "config.yml").write_text(json.dumps(config))  # JSON is YAML
    docker = folder / "docker" / "config.json"
    docker.parent.mkdir()
    docker.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}}}))
    basic = folder / "basic-auth"
    basic.mkdir()
    (basic / "username").write_text(USER)
    (basic / "password").write_text(PASSWORD)
    context = ssl.create_default_context(cafile=str(crt))
    with serving([exe, "serve", str(folder / "config.yml")], f"https://{host}/v2/", "docker-registry",
                 context=context):
        yield Registry(host, crt, docker, basic, folder / "data")
