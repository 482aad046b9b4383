"""The scheduler of a `swerl up` stack turns active schedules into flow runs, and its worker runs them.

test_deployments.py checks that `evaluate` declares its nightly schedule; this checks that the
server acts on it. With SQLAlchemy 2.1 beside Prefect 3.8 the schedule showed as active while
the scheduler raised `InvalidRequestError: Can't evaluate bulk DML statement` on every loop and
created no run at all. One real stack serves the module: the real `evaluate` deployment (its
02:00 UTC cron, unchanged) and a one-second flow on a 60 s interval, whose first run must
complete on the stack's worker. Last, no service may have logged a traceback meanwhile, but for a
few lost SQLite write races, which Prefect's loop services retry (see the last test).

Prefect's scheduler visits a deployment within 5 s of its creation (its recent-deployments
loop), so no scheduler setting needs changing for the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from uuid import UUID

import pytest
import yaml

from swerl.services import ServicesConfig, env
from tests.support.stacks import own_stack
from swerl.services.processes import log_tail

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PREFECT_FILE = ROOT / "deployments" / "prefect.yaml"
TICK_ENTRYPOINT = "tests/support/schedule_flow.py:schedule_tick"
TICK_INTERVAL = timedelta(seconds=60)
# The first tick is anchored this far after its deploy starts: later than the ~10 s the CLI takes
# on 2 cores, so the scheduler finds it still ahead (a tick already past is skipped, costing 60 s)
FIRST_TICK_DELAY = timedelta(seconds=30)
SCHEDULED_WAIT_S = 60.0  # the scheduler's recent-deployments loop runs every 5 s
# from the first tick: the worker polls every 10 s and starts a fresh Python for the run
COMPLETED_WAIT_S = 120.0
POLL_S = 2.0
SERVICE_LOGS = ("prefect-server.log", "prefect-worker.log", "mlflow.log")
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
# a few lost write races in the minutes this module runs; a service stuck on the lock logs one per loop
MAX_LOCK_CONTENTIONS = 6  # an error and the SQLAlchemy error chained to it count two


@dataclass(frozen=True)
class Deployed:
    evaluate: UUID
    tick: UUID
    started: datetime  # when the first deploy began: the scheduler schedules from a later moment
    tick_anchor: datetime


def _logs(config: ServicesConfig) -> str:
    """The end of the server's and worker's logs, for failure messages."""
    return "\n".join(f"--- last lines of {config.logs_dir / name}:\n{log_tail(config.logs_dir / name, lines=40)}"
                     for name in SERVICE_LOGS[:2])


def _deploy(config: ServicesConfig, prefect_file: Path, name: str) -> None:
    # from the repository root: the CLI resolves entrypoints against it, and the evaluate
    # deployment, having no pull step, records it as its runs' working directory
    command = [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--name", name, "--prefect-file", str(prefect_file)]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, **env(config)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _tick_prefect_file(path: Path, config: ServicesConfig, anchor: datetime) -> Path:
    import prefect

    path.write_text(yaml.safe_dump({
        "name": "swerl-schedule-test",
        "prefect-version": prefect.__version__,
        "pull": [{"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}],
        "deployments": [{
            "name": "every-minute", "entrypoint": TICK_ENTRYPOINT, "work_pool": {"name": config.work_pool},
            "schedules": [{"interval": TICK_INTERVAL.total_seconds(), "anchor_date": anchor.isoformat(),
                           "timezone": "UTC", "active": True}],
        }],
    }))
    return path


def _runs(client, deployment_id: UUID, scheduled_only: bool = True) -> list:
    """The deployment's flow runs, earliest due first; only those still SCHEDULED by default."""
    from prefect.client.schemas.filters import (DeploymentFilter, DeploymentFilterId, FlowRunFilter, FlowRunFilterState,
                                                FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    scheduled = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])))
    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
        flow_run_filter=scheduled if scheduled_only else None,
        sort=FlowRunSort.EXPECTED_START_TIME_ASC,
    )


def _wait_for_runs(client, config: ServicesConfig, deployment_id: UUID, name: str, scheduled_only: bool = True) -> list:
    deadline = time.monotonic() + SCHEDULED_WAIT_S
    while not (runs := _runs(client, deployment_id, scheduled_only)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    assert runs, (f"the scheduler created no scheduled run for the {name!r} deployment within {SCHEDULED_WAIT_S:g}s "
                  f"although its schedule is active\n{_logs(config)}")
    return runs


def _utc(moment: datetime) -> datetime:
    # a plain datetime: the client's are pendulum's, whose differences do not mix with timedelta
    return datetime.fromisoformat(moment.astimezone(timezone.utc).isoformat())


def is_sqlite_lock_contention(traceback: str) -> bool:
    """A traceback ending in SQLite's 'database is locked' (an entry of ``tracebacks``)."""
    return traceback.endswith("database is locked") and "sqlite3.OperationalError" in traceback


def tracebacks(log: Path) -> list[str]:
    """Each traceback in `log` as '<log>:<first line>-<last line>: <the exception it ends with>'."""
    lines = log.read_text(errors="replace").splitlines()
    found = []
    for i, line in enumerate(lines):
        if "Traceback" in line:
            # the exception is the first line after the indented frames
            end = next((j for j in range(i + 1, len(lines)) if lines[j] and not lines[j][0].isspace()), i)
            found.append(f"{log}:{i + 1}-{end + 1}: {lines[end].strip()}")
    return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # the default work pool: the one deployments/prefect.yaml names
    with own_stack(tmp_path_factory.mktemp("stack")) as config:
        yield config


@pytest.fixture(scope="module")
def client(stack):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: stack.prefect_api_url}), get_client(sync_client=True) as c:
        yield c


@pytest.fixture(scope="module")
def deployed(stack, client, tmp_path_factory) -> Deployed:
    # the tick first: its first run comes due while `evaluate` deploys
    started = datetime.now(timezone.utc).replace(microsecond=0)
    anchor = started + FIRST_TICK_DELAY
    _deploy(stack, _tick_prefect_file(tmp_path_factory.mktemp("tick") / "prefect.yaml", stack, anchor), "every-minute")
    _deploy(stack, PREFECT_FILE, "evaluate")
    return Deployed(evaluate=client.read_deployment_by_name("evaluate/evaluate").id,
                    tick=client.read_deployment_by_name("schedule-tick/every-minute").id, started=started,
                    tick_anchor=anchor)


def test_the_nightly_evaluate_schedule_creates_runs_at_02_00_utc_for_the_champion(stack, client, deployed):
    runs = _wait_for_runs(client, stack, deployed.evaluate, "evaluate")
    # a daily cron gets the scheduler's minimum of 3 runs (all within its 100-day horizon)
    assert len(runs) == 3
    starts = [_utc(r.expected_start_time) for r in runs]
    assert [(s.hour, s.minute, s.second) for s in starts] == [(2, 0, 0)] * 3
    assert [b - a for a, b in zip(starts, starts[1:])] == [timedelta(days=1)] * 2
    assert timedelta(0) <= starts[0] - deployed.started <= timedelta(days=1)
    assert [r.auto_scheduled for r in runs] == [True] * 3
    declared = yaml.safe_load(PREFECT_FILE.read_text())
    schedule = next(d for d in declared["deployments"] if d["name"] == "evaluate")["schedules"][0]
    assert [r.parameters for r in runs] == [schedule["parameters"]] * 3
    assert runs[0].parameters["params"]["model"] == "champion"


def test_an_interval_schedule_fires_every_minute_and_its_run_completes_on_the_worker(stack, client, deployed):
    # every state: the worker may have taken the first run already
    runs = _wait_for_runs(client, stack, deployed.tick, "every-minute", scheduled_only=False)
    starts = [_utc(r.expected_start_time) for r in runs]
    # at least the scheduler's minimum of 3, on the anchor's one-minute grid
    assert len(starts) >= 3
    assert [b - a for a, b in zip(starts, starts[1:])] == [TICK_INTERVAL] * (len(starts) - 1)
    assert (starts[0] - deployed.tick_anchor) % TICK_INTERVAL == timedelta(0)
    first = runs[0]
    deadline = time.monotonic() + max(0.0, (starts[0] - datetime.now(timezone.utc)).total_seconds()) + COMPLETED_WAIT_S
    while (run := client.read_flow_run(first.id)).state_type.value not in TERMINAL and time.monotonic() < deadline:
        time.sleep(POLL_S)
    assert run.state_type.value == "COMPLETED", (
        f"the run due at {starts[0]:%H:%M:%S} UTC is {run.state_type.value} ({run.state.message if run.state else ''}) "
        f"{COMPLETED_WAIT_S:g}s after it came due\n{_logs(stack)}")
    assert (run.work_pool_name, run.parameters) == (stack.work_pool, {})


def test_no_service_logged_a_traceback(stack, client, deployed):
    # once the scheduler has acted on both deployments, or had the time to: its errors are then in the log
    deadline = time.monotonic() + SCHEDULED_WAIT_S
    while time.monotonic() < deadline and not all(_runs(client, d) for d in (deployed.evaluate, deployed.tick)):
        time.sleep(POLL_S)
    logs = [stack.logs_dir / name for name in SERVICE_LOGS]
    assert [log.is_file() for log in logs] == [True] * len(logs)
    found = [t for log in logs for t in tracebacks(log)]
    contention = [t for t in found if is_sqlite_lock_contention(t)]
    # the server and its loop services share one SQLite file: under load a write can lose the race
    # and be retried on the service's next loop (PrefectHQ/prefect#18934, open upstream); the
    # scheduler still created and ran the runs the tests above require. Anything else is a bug.
    assert [t for t in found if t not in contention] == [], "services logged tracebacks:\n" + "\n".join(found)
    assert len(contention) <= MAX_LOCK_CONTENTIONS, "SQLite lock contention is no longer transient:\n" + "\n".join(contention)
