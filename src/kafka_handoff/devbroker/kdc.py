"""A throwaway MIT Kerberos KDC for the dev broker's ``kerberos`` mode (SASL_PLAINTEXT with GSSAPI).

The KDC is the distribution's ``krb5kdc`` (Debian/Ubuntu packages ``krb5-kdc``, ``krb5-admin-server``,
``krb5-user``; :func:`ensure_packages` installs them, as ``make setup`` does), run as an unprivileged process
on 127.0.0.1 with its own files in ``DATA_DIR/security/kdc``:

* ``krb5.conf`` (what clients and the broker JVM use: ``KRB5_CONFIG`` / ``-Djava.security.krb5.conf``):
  realm :data:`REALM` served by ``127.0.0.1:<port>`` over TCP (``udp_preference_limit = 1``), no DNS
  (``dns_lookup_kdc``/``dns_lookup_realm``/``rdns``/``dns_canonicalize_hostname`` off, so that the
  service principal is exactly ``kafka/127.0.0.1`` -- the host clients connect to);
* ``kdc.conf`` (``KRB5_KDC_PROFILE``), the database and its stash, made by ``kdb5_util create``;
* principals made with ``kadmin.local``: the broker's ``kafka/127.0.0.1@REALM`` (its keytab
  ``kafka.keytab``), and the clients :data:`CLIENTS` with a keytab each (``<name>.keytab``).

:meth:`Kdc.add_principal`, :meth:`Kdc.export_keytab` and :meth:`Kdc.rotate` (``cpw -randkey``: old keytabs
stop working) are there for tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kafka_handoff.errors import ConfigError

__all__ = [
    "CLIENTS",
    "PACKAGES",
    "REALM",
    "SERVICE_HOST",
    "SERVICE_NAME",
    "Kdc",
    "ensure_packages",
    "free_port",
    "kdc_binaries",
    "missing_binaries",
]

REALM = "HANDOFF.TEST"
SERVICE_NAME = "kafka"
#: The host of the broker's service principal: what clients connect to (the advertised listener host).
SERVICE_HOST = "127.0.0.1"
CLIENTS = ("alice", "bob", "admin")
PACKAGES = ("krb5-kdc", "krb5-admin-server", "krb5-user")
_BINARIES = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")
_SEARCH = ("/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin")
_READY_TIMEOUT_S = 20.0


def _which(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in _SEARCH:
        path = Path(d) / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def missing_binaries() -> list[str]:
    """The MIT Kerberos programs the dev KDC needs that are not installed."""
    return [b for b in _BINARIES if _which(b) is None]


def kdc_binaries() -> dict[str, str]:
    """Paths of ``krb5kdc``, ``kdb5_util``, ``kadmin.local``, ``kinit``; :class:`ConfigError` naming the
    packages when one is missing."""
    missing = missing_binaries()
    if missing:
        raise ConfigError(
            f"security: mode 'kerberos' needs MIT Kerberos ({', '.join(missing)} not found); install "
            f"{' '.join(PACKAGES)} (make setup, or: handoff broker setup-kerberos)"
        )
    return {b: str(_which(b)) for b in _BINARIES}


def ensure_packages(*, quiet: bool = True) -> bool:
    """Install the KDC packages with apt-get when they are missing (root only); True when all are there.
    Idempotent: nothing is run when the programs are present."""
    if not missing_binaries():
        return True
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return False
    out = subprocess.DEVNULL if quiet else None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([apt, "update", "-q"], check=False, stdout=out, stderr=out, env=env)
    subprocess.run(
        [apt, "install", "-y", "-q", "--no-install-recommends", *PACKAGES, "libkrb5-dev"],
        check=False,
        stdout=out,
        stderr=out,
        env=env,
    )
    return not missing_binaries()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _krb5_conf(port: int) -> str:
    return f"""[libdefaults]
    default_realm = {REALM}
    dns_lookup_kdc = false
    dns_lookup_realm = false
    rdns = false
    dns_canonicalize_hostname = false
    udp_preference_limit = 1
    ticket_lifetime = 10h
    renew_lifetime = 1d
    forwardable = false
    kdc_timeout = 3s
    max_retries = 2
    ignore_acceptor_hostname = false

[realms]
    {REALM} = {{
        kdc = 127.0.0.1:{port}
    }}

[domain_realm]
    127.0.0.1 = {REALM}
    localhost = {REALM}
"""


def _kdc_conf(directory: Path, port: int) -> str:
    return f"""[kdcdefaults]
    kdc_listen = 127.0.0.1:{port}
    kdc_tcp_listen = 127.0.0.1:{port}

[realms]
    {REALM} = {{
        database_name = {directory / "principal"}
        key_stash_file = {directory / "stash"}
        acl_file = {directory / "kadm5.acl"}
        max_life = 10h
        max_renewable_life = 1d
        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
        kdc_listen = 127.0.0.1:{port}
        kdc_tcp_listen = 127.0.0.1:{port}
    }}

[logging]
    kdc = FILE:{directory / "kdc.log"}
    default = FILE:{directory / "kdc.log"}
"""


@dataclass(slots=True)
class Kdc:
    """The KDC files of one secured dev broker (``directory``) and its port."""

    directory: Path
    port: int

    @property
    def krb5_conf(self) -> Path:
        return self.directory / "krb5.conf"

    @property
    def kdc_conf(self) -> Path:
        return self.directory / "kdc.conf"

    @property
    def log_file(self) -> Path:
        return self.directory / "kdc.log"

    @property
    def service_principal(self) -> str:
        return f"{SERVICE_NAME}/{SERVICE_HOST}@{REALM}"

    @property
    def broker_keytab(self) -> Path:
        return self.directory / "kafka.keytab"

    def keytab(self, client: str) -> Path:
        return self.directory / f"{client}.keytab"

    @staticmethod
    def principal(client: str) -> str:
        return f"{client}@{REALM}"

    def env(self) -> dict[str, str]:
        """The environment for the Kerberos tools (and clients) of this KDC."""
        return {
            **os.environ,
            "KRB5_CONFIG": str(self.krb5_conf),
            "KRB5_KDC_PROFILE": str(self.kdc_conf),
        }

    def command(self) -> list[str]:
        """``krb5kdc`` in the foreground (its environment: :meth:`env`)."""
        return [kdc_binaries()["krb5kdc"], "-n", "-r", REALM]

    def _kadmin(self, query: str) -> None:
        result = subprocess.run(
            [kdc_binaries()["kadmin.local"], "-r", REALM, "-q", query],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0 or "error" in result.stderr.lower():
            raise ConfigError(
                f"security: kadmin.local {query.split()[0]} failed: {result.stderr.strip()[-500:]}"
            )

    def add_principal(self, name: str, *, max_life: str | None = None) -> None:
        """A principal with a random key (``max_life``: e.g. ``"5 seconds"``, for expiry tests)."""
        life = f' -maxlife "{max_life}"' if max_life else ""
        self._kadmin(f"addprinc -randkey{life} {name}")

    def export_keytab(self, name: str, path: Path) -> Path:
        """``ktadd -norandkey``: ``name``'s current keys into ``path`` (0600)."""
        self._kadmin(f"ktadd -norandkey -k {path} {name}")
        os.chmod(path, 0o600)
        return path

    def rotate(self, name: str) -> None:
        """New random keys for ``name`` (``cpw -randkey``): keytabs exported before stop working."""
        self._kadmin(f"cpw -randkey {name}")

    def create(self, clients: Sequence[str] = CLIENTS) -> None:
        """Write the configuration, create the database and the principals with their keytabs."""
        bins = kdc_binaries()
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.krb5_conf.write_text(_krb5_conf(self.port), encoding="utf-8")
        self.kdc_conf.write_text(_kdc_conf(self.directory, self.port), encoding="utf-8")
        (self.directory / "kadm5.acl").write_text("", encoding="utf-8")
        # The master password only protects the throwaway database; the stash file (0600) holds it.
        result = subprocess.run(
            [bins["kdb5_util"], "-r", REALM, "create", "-s", "-W", "-P", os.urandom(12).hex()],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ConfigError(f"security: kdb5_util create failed: {result.stderr.strip()[-500:]}")
        self.add_principal(self.service_principal)
        self.export_keytab(self.service_principal, self.broker_keytab)
        for client in clients:
            self.add_principal(self.principal(client))
            self.export_keytab(self.principal(client), self.keytab(client))

    def wait_ready(self, alive: Callable[[], bool] | None = None, timeout: float = _READY_TIMEOUT_S) -> None:
        """Wait until the KDC accepts TCP connections on its port (``alive``: whether its process still
        runs; a dead one fails at once)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline or (alive is not None and not alive()):
                tail = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
                raise ConfigError(f"security: the KDC on 127.0.0.1:{self.port} did not start:\n{tail}")
            time.sleep(0.05)

    def kinit(self, client: str, ccache: Path, *, lifetime: str | None = None) -> None:
        """A ticket for ``client`` from its keytab into the cache file ``ccache`` (tests, docs)."""
        args = [kdc_binaries()["kinit"], "-k", "-t", str(self.keytab(client)), "-c", f"FILE:{ccache}"]
        if lifetime:
            args += ["-l", lifetime]
        result = subprocess.run(
            [*args, self.principal(client)], env=self.env(), capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise ConfigError(f"security: kinit {client} failed: {result.stderr.strip()[-500:]}")
