"""The managed PostgreSQL cluster of `swerl up --postgres`: Prefect's and MLflow's databases.

The cluster lives in ``<home>/postgres/data`` and is made once with ``initdb``; later starts
reuse it, so nothing is lost across `down` and `up`. The server listens on 127.0.0.1 only
(TCP, no Unix socket), with one superuser ``swerl`` whose random password is kept in
``<home>/postgres/pgpass`` (mode 0600, libpq's password-file format): URLs carry no secret,
the services find it through ``PGPASSFILE``.

PostgreSQL refuses to run as root. When `swerl up` runs as root the cluster runs as
``ServicesConfig.postgres_os_user`` (``postgres`` by default, created as a system account
when missing), which owns the data folder and must be able to enter every folder above it.
"""

from __future__ import annotations

import glob
import grp
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

from swerl.services import processes
from swerl.services.config import PG_DATABASES, PG_SUPERUSER, ServicesConfig
from swerl.services.errors import ServicesError

INITDB_TIMEOUT_S = 300.0
CONNECT_TIMEOUT_S = 3


def data_dir(config: ServicesConfig) -> Path:
    return config.postgres_dir / "data"


def pgpass(config: ServicesConfig) -> Path:
    return config.postgres_dir / "pgpass"


def _bin_dirs() -> list[Path]:
    on_path = shutil.which("initdb")
    newest_first = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name)
                          if Path(d).parent.name.isdigit() else 0, reverse=True)
    return [Path(d) for d in ([os.path.dirname(on_path)] if on_path else []) + ["/usr/local/bin"] + newest_first]


def bin_dir() -> Path:
    """The folder holding initdb and postgres: PATH first, then /usr/local/bin, then Debian's newest version."""
    for d in _bin_dirs():
        if (d / "initdb").is_file() and (d / "postgres").is_file():
            return d
    raise ServicesError(
        "PostgreSQL's server programs (initdb, postgres) are neither on PATH nor in /usr/local/bin or "
        "/usr/lib/postgresql/*/bin; install them (Debian/Ubuntu: apt-get install postgresql) or drop --postgres"
    )


def server_command(config: ServicesConfig) -> list[str]:
    try:
        program = str(bin_dir() / "postgres")
    except ServicesError:
        program = "postgres"  # only `up` needs the real one, and says what is missing
    return [program, "-D", str(data_dir(config)), "-p", str(config.postgres_port),
            "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="]


def os_user(config: ServicesConfig) -> str | None:
    """The account the cluster runs as: None (the caller) unless the caller is root."""
    return config.postgres_os_user if os.geteuid() == 0 else None


def _ensure_account(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    command = ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
               "--shell", "/usr/sbin/nologin", name]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except OSError as e:
        done = subprocess.CompletedProcess(command, 127, "", str(e))
    if done.returncode != 0:
        raise ServicesError(
            f"PostgreSQL refuses to run as root, and creating the system account {name!r} for it failed "
            f"({' '.join(command)}: {(done.stdout + done.stderr).strip()}); create it yourself or name an existing "
            f"one with --postgres-os-user (ServicesConfig.postgres_os_user)"
        )
    return pwd.getpwnam(name)


def _blocking_folder(path: Path, account: pwd.struct_passwd) -> Path | None:
    """The first folder from / down to ``path`` that ``account`` may not enter, if any."""
    groups = {account.pw_gid} | {g.gr_gid for g in grp.getgrall() if account.pw_name in g.gr_mem}
    for folder in [*reversed(path.parents), path]:
        st = folder.stat()
        if st.st_uid == account.pw_uid:
            bit = 0o100
        elif st.st_gid in groups:
            bit = 0o010
        else:
            bit = 0o001
        if not st.st_mode & bit:
            return folder
    return None


def ensure_cluster(config: ServicesConfig, log: Path) -> bool:
    """Make the cluster with initdb unless it exists; True when it was made now."""
    data = data_dir(config)
    if (data / "PG_VERSION").is_file():
        if not pgpass(config).is_file():
            raise ServicesError(
                f"the PostgreSQL cluster in {data} exists but its password file {pgpass(config)} is gone; restore it, "
                f"or remove {config.postgres_dir} to start a new, empty cluster"
            )
        return False
    initdb = bin_dir() / "initdb"
    user = os_user(config)
    config.postgres_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(config.postgres_dir, 0o711)  # the account may enter, not list
    if user is not None:
        account = _ensure_account(user)
        blocked = _blocking_folder(config.postgres_dir, account)
        if blocked is not None:
            raise ServicesError(
                f"the PostgreSQL cluster runs as {user!r} (initdb refuses root), which may not enter {blocked} "
                f"(mode {blocked.stat().st_mode & 0o777:o}); choose a --home under folders others may enter, "
                f"or allow it with `chmod o+x {blocked}`"
            )
    data.mkdir(mode=0o700, exist_ok=True)
    if user is not None:
        os.chown(data, account.pw_uid, account.pw_gid)
    password = secrets.token_urlsafe(24)
    fd = os.open(pgpass(config), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"*:*:*:{PG_SUPERUSER}:{password}\n")
    # initdb reads the password from a file its account can open (a pipe of root's it may not reopen)
    pwfile = config.postgres_dir / "initdb.pw"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    if user is not None:
        os.chown(pwfile, account.pw_uid, account.pw_gid)
    command = [str(initdb), "-D", str(data), "-U", PG_SUPERUSER, f"--pwfile={pwfile}", "--auth=scram-sha-256",
               "-E", "UTF8", "--no-locale"]
    log.parent.mkdir(parents=True, exist_ok=True)
    offset = log.stat().st_size if log.exists() else 0
    try:
        with log.open("ab") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} swerl up: {' '.join(command)}\n".encode())
            out.flush()
            done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  cwd=config.postgres_dir, user=user, timeout=INITDB_TIMEOUT_S)
    finally:
        pwfile.unlink(missing_ok=True)
    if done.returncode != 0:
        raise ServicesError(f"initdb exited with code {done.returncode}; last lines of {log}:\n"
                            f"{processes.log_tail(log, offset)}")
    return True


def connect(config: ServicesConfig, database: str = "postgres"):
    """A psycopg2 connection to a database of the managed cluster, as its superuser."""
    import psycopg2

    return psycopg2.connect(host="127.0.0.1", port=config.postgres_port, user=PG_SUPERUSER, dbname=database,
                            passfile=str(pgpass(config)), connect_timeout=CONNECT_TIMEOUT_S)


def ensure_databases(config: ServicesConfig) -> list[str]:
    """Create Prefect's and MLflow's databases when missing; the names of those made now."""
    made = []
    conn = connect(config)
    try:
        conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
        with conn.cursor() as cur:
            for name in PG_DATABASES:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{name}"')
                    made.append(name)
    finally:
        conn.close()
    return made


def probe(config: ServicesConfig) -> tuple[bool, str]:
    """The cluster accepts the superuser's connection (never raises)."""
    try:
        conn = connect(config)
    except Exception as e:  # noqa: BLE001 - psycopg2's errors and a missing password file alike
        why = " ".join(str(e).split())
        return False, f"connect to {config.postgres_url('postgres')}: {type(e).__name__}: {why}"
    conn.close()
    return True, ""


def stop(pid: int, grace_s: float) -> None:
    """Fast shutdown (SIGINT: sessions are ended, a checkpoint is written), then SIGTERM/SIGKILL if it hangs."""
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not processes.is_running(pid):
            processes.reap(pid)
            return
        time.sleep(0.1)
    processes.stop_group(pid, 1.0)
