"""A private, throw-away PostgreSQL cluster that a fault test may stop and start at will.

It lives in a temporary directory on a free port with trust authentication, so stopping it
(an outage) touches nobody else's database. The cluster's processes run as the ``postgres``
system user when the tests run as root (the server refuses to run as root).

    with PrivateCluster.create() as cluster:
        url = cluster.create_database()
        cluster.stop()      # an immediate stop: like pulling the plug
        cluster.start()
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

__all__ = ["PRIMARY_CONF", "PrivateCluster", "find_pg_bin", "pg_available", "standby_of"]


def find_pg_bin() -> Path | None:
    """The directory of the newest installed ``initdb``/``pg_ctl``, or None."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).parent
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    for candidate in reversed(candidates):
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    return None


def pg_available() -> bool:
    """Whether a private cluster can be made here (the binaries exist, and a user to run them)."""
    if find_pg_bin() is None:
        return False
    if os.geteuid() != 0:
        return True
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return shutil.which("runuser") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PrivateCluster:
    """One initdb'd cluster in a temporary directory; see the module docstring."""

    def __init__(self, root: Path, bin_dir: Path, port: int, run_as: str | None) -> None:
        self.root = root
        self.data = root / "data"
        self.bin_dir = bin_dir
        self.port = port
        self.run_as = run_as
        self.admin_url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    # -- life cycle ----------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def create(cls, extra_conf: str = "") -> Iterator[PrivateCluster]:
        """initdb a cluster, start it, yield it, and always stop it and remove its files.

        ``extra_conf`` is appended to ``postgresql.conf`` (later settings win), for example
        ``shared_preload_libraries`` for a benchmark.
        """
        bin_dir = find_pg_bin()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) are installed")
        run_as = "postgres" if os.geteuid() == 0 else None
        root = Path(tempfile.mkdtemp(prefix="helix-pg-"))
        cluster = cls(root, bin_dir, _free_port(), run_as)
        try:
            if run_as is not None:
                entry = pwd.getpwnam(run_as)
                os.chown(root, entry.pw_uid, entry.pw_gid)
            cluster._run(
                "initdb",
                "-D",
                str(cluster.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            )
            with open(cluster.data / "postgresql.conf", "a") as conf:
                conf.write(
                    "\n# helix-dbos fault tests: loopback only, sockets in the cluster's dir\n"
                    f"port = {cluster.port}\n"
                    "listen_addresses = '127.0.0.1'\n"
                    f"unix_socket_directories = '{root}'\n"
                    "max_connections = 200\n"
                    # No fsync: the tests stop the server, never the machine, so what the server
                    # wrote reaches the files anyway. synchronous_commit stays on: with it off,
                    # an immediate stop would lose commits the clients were told had happened.
                    "fsync = off\n"
                    "full_page_writes = off\n"
                    "shared_buffers = 32MB\n"
                )
                conf.write(extra_conf)
            cluster.start()
            yield cluster
        finally:
            with contextlib.suppress(Exception):
                cluster.stop(mode="immediate")
            shutil.rmtree(root, ignore_errors=True)

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / tool), *args]
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "start"
        )
        self.wait_ready()

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server; ``immediate`` drops every connection at once, like a crash."""
        if not (self.data / "postmaster.pid").exists():
            return
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def is_running(self) -> bool:
        """Whether the server accepts connections now."""
        try:
            with psycopg.connect(self.admin_url, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the server accepts connections."""
        deadline = time.monotonic() + timeout
        while not self.is_running():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the private cluster on port {self.port} did not start")
            time.sleep(0.1)

    def wait_streaming(self, primary: PrivateCluster, timeout: float = 60.0) -> None:
        """Block until ``primary`` reports this standby streaming as its synchronous one."""
        deadline = time.monotonic() + timeout
        while True:
            with psycopg.connect(primary.admin_url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT state, sync_state FROM pg_stat_replication"
                    " WHERE application_name = 'standby1'"
                ).fetchone()
            if row == ("streaming", "sync"):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the standby is not streaming in sync: {row}")
            time.sleep(0.1)

    def promote(self) -> None:
        """``pg_ctl promote``: a standby becomes a primary that accepts writes."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")

    # -- databases -----------------------------------------------------------------------

    def create_database(self) -> str:
        """Create an empty database and return its URL."""
        name = f"helix_fault_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def url(self, database: str) -> str:
        """The URL of ``database`` on this cluster."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def terminate_backends(self, database: str | None = None) -> int:
        """``pg_terminate_backend`` every other client backend (of ``database``, if given)."""
        sql = (
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        params: tuple[str, ...] = ()
        if database is not None:
            sql += " AND datname = %s"
            params = (database,)
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            row = conn.execute(sql, params).fetchone()
        return int(row[0]) if row else 0


#: A primary that streams to one synchronous standby (``PrivateCluster.standby``): a commit
#: returns once the standby has flushed it, so a promotion loses no acknowledged commit.
PRIMARY_CONF = (
    "wal_level = replica\n"
    "max_wal_senders = 5\n"
    "hot_standby = on\n"
    "synchronous_standby_names = 'standby1'\n"
    "synchronous_commit = on\n"
    "wal_keep_size = 256MB\n"
)


@contextlib.contextmanager
def standby_of(primary: PrivateCluster) -> Iterator[PrivateCluster]:
    """A streaming standby of ``primary`` (``pg_basebackup -R``), named ``standby1`` in its
    ``primary_conninfo`` (the primary's ``synchronous_standby_names``), started and caught
    up; always stopped and removed."""
    root = Path(tempfile.mkdtemp(prefix="helix-pg-standby-"))
    standby = PrivateCluster(root, primary.bin_dir, _free_port(), primary.run_as)
    try:
        if standby.run_as is not None:
            entry = pwd.getpwnam(standby.run_as)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        # pg_basebackup sits beside the real pg_ctl (a PATH may link only initdb and pg_ctl).
        standby.bin_dir = Path(os.path.realpath(primary.bin_dir / "pg_ctl")).parent
        standby._run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", str(standby.data), "-R", "-X", "stream", "--no-sync",
        )  # fmt: skip
        # postgresql.auto.conf: read last, where -R wrote its own primary_conninfo.
        with open(standby.data / "postgresql.auto.conf", "a") as conf:
            conf.write(
                "\n# the standby\n"
                f"port = {standby.port}\n"
                # Promoted, it has no standby of its own: waiting for one (the primary's
                # setting, copied by the backup) would hang every commit for ever.
                "synchronous_standby_names = ''\n"
                f"unix_socket_directories = '{root}'\n"
                "primary_conninfo = 'host=127.0.0.1 "
                f"port={primary.port} user=postgres application_name=standby1'\n"
            )
        standby.start()
        standby.wait_streaming(primary)
        yield standby
    finally:
        with contextlib.suppress(Exception):
            standby.stop(mode="immediate")
        shutil.rmtree(root, ignore_errors=True)
