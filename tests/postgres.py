"""A throw-away PostgreSQL server for the tests: Debian's binaries, a cluster in a temporary
folder, a free local port, trust authentication; stopped at the end of the session.

Debian's ``postgresql`` package provides the binaries (``make test`` installs it). PostgreSQL
refuses to run as root, so as root the cluster runs as the ``postgres`` user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from .service_helpers import free_port


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresServer:
    def __init__(self, root: Path) -> None:
        bindir = pg_bin()
        if bindir is None:
            raise RuntimeError("PostgreSQL is not installed: run scripts/install-postgresql.sh")
        self.bindir = bindir
        self.data = root / "pgdata"
        self.port = free_port()
        self.as_user = "postgres" if os.geteuid() == 0 else None
        self.data.mkdir(parents=True)
        if self.as_user:
            entry = pwd.getpwnam(self.as_user)
            os.chmod(root, 0o755)
            os.chown(root, entry.pw_uid, entry.pw_gid)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
        self.superuser = self.as_user or pwd.getpwuid(os.geteuid()).pw_name
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", self.superuser, "--no-sync", "-E", "UTF8")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.data / "server.log"), "-w", "-o",
                  f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off "
                  "-c max_connections=200", "start")

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self.as_user:
            cmd = ["runuser", "-u", self.as_user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def create_database(self) -> str:
        """A new, empty database; its SQLAlchemy URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.sqlalchemy_url(name)

    def url(self, db: str) -> str:
        return f"postgresql://{self.superuser}@127.0.0.1:{self.port}/{db}"

    def sqlalchemy_url(self, db: str) -> str:
        return f"postgresql+psycopg://{self.superuser}@127.0.0.1:{self.port}/{db}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            time.sleep(0.5)
