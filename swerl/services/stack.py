"""Start, stop and inspect the local stack: a Prefect server, a Prefect worker, an MLflow server."""

from __future__ import annotations

import fcntl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from swerl.services import commands, postgres, processes
from swerl.services.commands import ServiceSpec
from swerl.services.config import ServicesConfig, save_config
from swerl.services.errors import ServicesError

POLL_S = 0.25
WORK_POOL_CREATE_TIMEOUT_S = 120.0


@dataclass
class ServiceStatus:
    name: str
    pid: int | None
    url: str
    healthy: bool
    log: Path
    detail: str = ""  # why it is not healthy
    startup_s: float | None = None  # seconds from start to healthy, for a service `up` started


@dataclass
class _Running:
    """A service this call is responsible for waiting on."""

    spec: ServiceSpec
    record: processes.PidRecord
    proc: subprocess.Popen | None  # None when it was already running
    log_offset: int


def env(config: ServicesConfig) -> dict[str, str]:
    """PREFECT_API_URL and MLFLOW_TRACKING_URI: what clients need to reach the stack."""
    return commands.env(config)


def _log(config: ServicesConfig, name: str) -> Path:
    return config.logs_dir / f"{name}.log"


def _adopt(config: ServicesConfig, spec: ServiceSpec) -> processes.PidRecord | None:
    """The running instance of this service, if its pid file names a live process of ours; stale files are removed."""
    record = processes.read_record(config.run_dir, spec.name)
    if record is None:
        return None
    if not processes.is_ours(record):
        processes.remove_record(config.run_dir, spec.name)
        return None
    # The interpreter may be spelled differently (python, python3) by whichever entry point started it
    if record.command[1:] != spec.command[1:]:
        raise ServicesError(
            f"{spec.name} already runs (pid {record.pid}) with other settings: {' '.join(record.command)}; "
            f"run `swerl down --home {config.home}` first to restart it with the new ones"
        )
    return record


def _check_port(config: ServicesConfig, spec: ServiceSpec) -> None:
    if spec.port is not None and not processes.port_free(config.host, spec.port):
        raise ServicesError(
            f"port {spec.port} on {config.host} is already in use by another program, so {spec.name} cannot listen "
            f"there; choose a free port with {spec.port_hint}, or stop what holds it"
        )


def _start(config: ServicesConfig, spec: ServiceSpec) -> _Running:
    log = _log(config, spec.name)
    offset = log.stat().st_size if log.exists() else 0
    proc, record = processes.start(spec.name, spec.command, spec.env, config.home, log, spec.port, config.run_dir,
                                   user=spec.user)
    return _Running(spec, record, proc, offset)


def _check_alive(config: ServicesConfig, running: _Running) -> None:
    exited = running.proc.poll() if running.proc is not None else None
    if exited is not None or not processes.is_running(running.record.pid):
        if exited is None and running.proc is not None:
            # It can die between poll() and the /proc check; reap it so the report carries its code.
            try:
                exited = running.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                exited = None
        log = _log(config, running.spec.name)
        code = f" with code {exited}" if exited is not None else ""
        raise ServicesError(
            f"{running.spec.name} exited{code} while starting; last lines of {log}:\n"
            f"{processes.log_tail(log, running.log_offset)}"
        )


def _wait_healthy(config: ServicesConfig, running: _Running, deadline: float, watch: list[_Running]) -> None:
    """Wait for `running` to answer its probe; fail as soon as it or any process in `watch` exits."""
    spec, log = running.spec, _log(config, running.spec.name)
    why = ""
    while True:
        for other in [running, *watch]:
            _check_alive(config, other)
        healthy, why = spec.probe(config)
        if healthy:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    started_here = "" if running.proc is not None else f" (already running as pid {running.record.pid}; `swerl down` stops it)"
    raise ServicesError(
        f"{spec.name} did not become healthy within {config.startup_timeout_s:g}s{started_here}: {why}; "
        f"raise ServicesConfig.startup_timeout_s (--timeout) if the machine is slow; last lines of {log}:\n"
        f"{processes.log_tail(log, running.log_offset)}"
    )


def _ensure_work_pool(config: ServicesConfig) -> None:
    url = f"{config.prefect_api_url}/work_pools/{config.work_pool}"
    with httpx.Client(timeout=10.0, trust_env=False) as client:
        r = client.get(url)
    if r.status_code == 200:
        pool_type = r.json().get("type")
        if pool_type != "process":
            raise ServicesError(
                f"work pool {config.work_pool!r} exists with type {pool_type!r}, but the local worker needs a "
                f"'process' pool; choose another name with --work-pool (ServicesConfig.work_pool)"
            )
        return
    if r.status_code != 404:
        raise ServicesError(f"GET {url}: HTTP {r.status_code} {r.text[:300]}")
    command = commands.work_pool_create(config)
    # The CLI fills in the process worker's base job template, which a bare API call would have to rebuild
    done = subprocess.run(command, env=commands.child_env(config), cwd=config.home, capture_output=True, text=True,
                          timeout=WORK_POOL_CREATE_TIMEOUT_S)
    if done.returncode != 0:
        raise ServicesError(
            f"creating work pool {config.work_pool!r} failed ({' '.join(command)} exited {done.returncode}):\n"
            f"{(done.stdout + done.stderr).strip()[-2000:]}"
        )


def _stop(config: ServicesConfig, record: processes.PidRecord) -> bool:
    """Stop a recorded service if it is still ours; always forget its pid file. True when something was stopped."""
    stopped = False
    if processes.is_ours(record):
        if record.name == commands.POSTGRES:
            postgres.stop(record.pid, config.stop_timeout_s)
        else:
            processes.stop_group(record.pid, config.stop_timeout_s)
        stopped = True
    processes.remove_record(config.run_dir, record.name)
    return stopped


@contextmanager
def _locked(config: ServicesConfig) -> Iterator[None]:
    """One `up` or `down` at a time per home: two racing `up`s would both find nothing running."""
    config.home.mkdir(parents=True, exist_ok=True)
    # Python opens files non-inheritable, so the services started under the lock do not keep holding it
    with (config.home / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def up(config: ServicesConfig) -> list[ServiceStatus]:
    """Start what is not running, wait until every service is healthy, and return their status.

    Services already up are left alone. When one fails, the services this call started are
    stopped again and the error quotes the end of the failing service's log.
    """
    with _locked(config):
        return _up(config)


def _up(config: ServicesConfig) -> list[ServiceStatus]:
    specs = {s.name: s for s in commands.all_specs(config)}
    adopted = {name: _adopt(config, spec) for name, spec in specs.items()}
    # Every port is checked before anything starts, so a clash costs no start-up
    for name, spec in specs.items():
        if adopted[name] is None:
            _check_port(config, spec)

    started: list[_Running] = []
    startup_s: dict[str, float] = {}

    def launch(name: str) -> _Running:
        if adopted[name] is not None:
            return _Running(specs[name], adopted[name], None, 0)
        running = _start(config, specs[name])
        started.append(running)
        return running

    def wait(running: _Running, t0: float) -> None:
        _wait_healthy(config, running, t0 + config.startup_timeout_s, started)
        if running.proc is not None:
            startup_s[running.spec.name] = round(time.monotonic() - t0, 1)

    try:
        # Both servers start at once, and the worker as soon as the Prefect server answers:
        # each spends most of its start-up importing and migrating, which overlaps well
        if config.postgres:
            # Both servers keep their databases there: it runs, and holds them, before either starts
            t_pg = time.monotonic()
            if adopted[commands.POSTGRES] is None:
                postgres.ensure_cluster(config, _log(config, commands.POSTGRES))
            wait(launch(commands.POSTGRES), t_pg)
            postgres.ensure_databases(config)
        t0 = time.monotonic()
        server, mlflow = launch(commands.PREFECT_SERVER), launch(commands.MLFLOW)
        wait(server, t0)
        _ensure_work_pool(config)
        if config.worker:
            t_worker = time.monotonic()
            worker = launch(commands.PREFECT_WORKER)
        wait(mlflow, t0)
        if config.worker:
            wait(worker, t_worker)
    except BaseException:
        for running in reversed(started):
            _stop(config, running.record)
        raise
    # Recorded only once it runs, so a failed attempt does not misdescribe what is up
    save_config(config)
    result = status(config)
    for s in result:
        s.startup_s = startup_s.get(s.name)
    return result


def down(config: ServicesConfig) -> list[str]:
    """Stop every service recorded in config.home (worker first); return the names of those stopped."""
    if not config.run_dir.is_dir():
        return []
    with _locked(config):
        return _down(config)


def _down(config: ServicesConfig) -> list[str]:
    stopped = []
    # The worker goes first so it does not spend its grace period retrying a vanished server
    # PostgreSQL last: the servers close their connections first
    for name in (commands.PREFECT_WORKER, commands.MLFLOW, commands.PREFECT_SERVER, commands.POSTGRES):
        record = processes.read_record(config.run_dir, name)
        if record is not None and _stop(config, record):
            stopped.append(name)
    return stopped


def status(config: ServicesConfig) -> list[ServiceStatus]:
    """Each service's pid (None when not running), URL and health."""
    result = []
    for spec in commands.all_specs(config):
        record = processes.read_record(config.run_dir, spec.name)
        pid = record.pid if record is not None and processes.is_ours(record) else None
        if pid is None:
            healthy, why = False, "not running"
        else:
            healthy, why = spec.probe(config)
        result.append(ServiceStatus(spec.name, pid, spec.url, healthy, _log(config, spec.name), why))
    return result
