"""Following a flow run as a person reads it: one line per stage, the reason when it fails.

The pipeline writes a line per stage to the logger ``STAGE_LOGGER`` (what the stage did, in
words); the follower polls the Prefect API for the run, its subflow runs and those lines,
and prints them instead of Prefect's raw events. When the run fails it ends with the tail
of the failed (sub)flow run's error log and, last, the failure's reason. The formatting is
pure; ``follow_run`` does the polling. Prefect is imported only inside functions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from swerl.orchestration.summary import duration

# a child of Prefect's flow-run logger: its records reach the API's log, under this name
STAGE_LOGGER = "prefect.flow_runs.stages"
FINAL = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})
BAD = frozenset({"FAILED", "CRASHED", "CANCELLED"})
ENGINE_FRAME = "/site-packages/prefect/"
EXCEPTION_PREFIXES = ("Flow run encountered an exception: ", "Task run encountered an exception ")


def say(line: str) -> None:
    """A line for a person: the console, and the flow run's log under STAGE_LOGGER, which `swerl follow` prints."""
    import logging

    from prefect.logging import get_run_logger

    logging.LoggerAdapter(logging.getLogger(STAGE_LOGGER), get_run_logger().extra).info(line)


@dataclass(frozen=True)
class RunView:
    """The part of a flow run's record the follower prints."""

    id: str
    name: str
    state_type: str  # COMPLETED, FAILED, RUNNING, ...
    state_name: str  # Completed, Failed, Running, Cached, Late, ...
    message: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    changed: datetime | None = None  # when it entered this state


def clock(when: datetime) -> str:
    return when.astimezone().strftime("%H:%M:%S")


def reason(message: str | None) -> str:
    """A state message without Prefect's wrapper: ``ValueError: every task ...``."""
    text = (message or "no message").strip()
    for prefix in EXCEPTION_PREFIXES:
        text = text.removeprefix(prefix)
    return text


def state_line(run: RunView) -> str:
    """``eval-rft: Failed after 3m 06s`` / ``pipeline-demo: Running``."""
    took = f" after {duration((run.end - run.start).total_seconds())}" if run.start and run.end and run.state_type in FINAL else ""
    return f"{run.name}: {run.state_name}{took}"


def shown_change(run: RunView, root_id: str) -> bool:
    """Which state changes get a line: every one of the root run's, a subflow's only when it ends
    badly (the pipeline's own stage lines say when a stage starts and what it did)."""
    return run.id == root_id or run.state_type in BAD


def culprit(root: RunView, runs: Sequence[RunView]) -> RunView:
    """The run whose failure ended the root: the earliest subflow run that ended badly, else the root."""
    bad = [r for r in runs if r.id != root.id and r.state_type in BAD]
    return min(bad, key=lambda r: (r.end is None, r.end.timestamp() if r.end else 0.0)) if bad else root


def without_engine_frames(text: str) -> list[str]:
    """A log message's lines without the traceback frames inside Prefect's engine (each frame:
    its ``File`` line and the more indented lines under it); the user's frames stay."""
    out: list[str] = []
    skipping: int | None = None  # the indent of a dropped frame's File line
    for line in text.rstrip().splitlines():
        indent = len(line) - len(line.lstrip())
        if skipping is not None and indent > skipping:
            continue
        skipping = None
        if line.lstrip().startswith("File ") and ENGINE_FRAME in line.replace("\\", "/"):
            skipping = indent
            continue
        out.append(line)
    return out


def tail(messages: Sequence[str], lines: int) -> list[str]:
    """The last ``lines`` lines of the last error message: the flow's own traceback, which holds
    the failed task's frames and ends with the exception (earlier messages repeat it)."""
    return without_engine_frames(messages[-1])[-lines:] if messages else []


def failure_lines(root: RunView, failed: RunView, errors: Sequence[str], stage: str | None, lines: int = 15,
                  ui_url: str | None = None) -> list[str]:
    """The end of a failed run's output: the failed run's error log tail, where to read more, then the reason."""
    out: list[str] = []
    shown = tail(errors, lines)
    if shown:
        out.append(f"--- the end of {failed.name}'s error log ---")
        out += [f"  {line}" for line in shown]
    more = f"more: prefect flow-run logs {failed.id}" + (f"; {ui_url}/runs/flow-run/{failed.id}" if ui_url else "")
    out.append(more)
    where = f" in stage {stage}" if stage else (f" in {failed.name}" if failed.id != root.id else "")
    out.append(f"{root.name} {root.state_name.lower()}{where}: {reason(failed.message or root.message)}")
    return out


def stage_after(line: str, current: str | None) -> str | None:
    """The stage under way after a pipeline line: ``eval-rft: started`` starts ``eval-rft``, the
    stage's own next line (what it did) ends it, any other line changes nothing."""
    name, sep, rest = line.partition(": ")
    if sep and rest == "started":
        return name
    return None if current is not None and name.split(" (", 1)[0] == current else current


# --- polling the API ------------------------------------------------------------------------------


def _view(run: Any) -> RunView:
    state = run.state
    return RunView(id=str(run.id), name=run.name, state_type=state.type.value if state else "PENDING",
                   state_name=state.name if state else "Pending", message=state.message if state else None,
                   start=run.start_time, end=run.end_time, changed=state.timestamp if state else None)


async def _descendants(client: Any, root_id: Any) -> list[Any]:
    """Subflow runs of the root, and theirs (a subflow run's parent is a task run of its parent)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId
    from prefect.client.schemas.sorting import FlowRunSort

    found, frontier = [], [root_id]
    while frontier:
        runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)),
                                           sort=FlowRunSort.START_TIME_ASC, limit=200)
        new = [r for r in runs if r.id not in {f.id for f in found}]
        found += new
        frontier = [r.id for r in new]
    return found


async def _logs(client: Any, run_ids: Sequence[Any], since: datetime | None = None, min_level: int = 0) -> list[Any]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId, LogFilterLevel, LogFilterTimestamp
    from prefect.client.schemas.sorting import LogSort

    log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=list(run_ids)), level=LogFilterLevel(ge_=min_level),
                           timestamp=LogFilterTimestamp(after_=since) if since else None)
    out, offset = [], 0
    while True:
        page = await client.read_logs(log_filter=log_filter, limit=200, offset=offset, sort=LogSort.TIMESTAMP_ASC)
        out += page
        if len(page) < 200:
            return out
        offset += 200


async def follow_run(flow_run_id: Any, emit: Callable[[str], None], interval: float = 5.0, error_lines: int = 15,
                     lag: float = 3.0) -> RunView:
    """Print the run's stage lines and state changes in time order until it ends; on failure,
    the failed run's error-log tail and, last, the reason. Returns the root run's final view.

    Stage lines are the root run's ``STAGE_LOGGER`` records. Logs reach the API in batches
    (every 2 s by default) while states arrive at once, so a line is printed only once it is
    ``lag`` seconds old, and each poll re-reads the logs a minute back, dropping those printed.
    """
    from datetime import timedelta

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_UI_URL

    seen_logs: set[Any] = set()
    states: dict[str, str] = {}
    pending: list[tuple[datetime, str]] = []
    told: list[tuple[datetime, str]] = []  # the stage lines, to tell which stage was under way
    since: datetime | None = None

    def flush(upto: datetime | None) -> None:
        pending.sort(key=lambda item: item[0])
        while pending and (upto is None or pending[0][0] <= upto):
            when, line = pending.pop(0)
            emit(f"{clock(when)}  {line}")

    async with get_client() as client:
        while True:
            root_run = await client.read_flow_run(flow_run_id)
            final = root_run.state is not None and root_run.state.type.value in FINAL
            if final:
                await asyncio.sleep(lag)  # the last batch of logs
            for log in await _logs(client, [root_run.id], since):
                if log.id not in seen_logs and log.name == STAGE_LOGGER:
                    seen_logs.add(log.id)
                    pending.append((log.timestamp, log.message))
                    told.append((log.timestamp, log.message))
                    since = log.timestamp - timedelta(minutes=1)
            root = _view(root_run)
            runs = [root] + [_view(r) for r in await _descendants(client, root_run.id)]
            for run in runs:
                if states.get(run.id) != run.state_name and shown_change(run, root.id):
                    pending.append((run.changed or datetime.now().astimezone(), state_line(run)))
                states[run.id] = run.state_name
            if not final:
                flush(datetime.now().astimezone() - timedelta(seconds=lag))
                await asyncio.sleep(interval)
                continue
            flush(None)
            if root.state_type in BAD:
                failed = culprit(root, runs)
                stage = None
                for _, line in sorted(told, key=lambda item: item[0]):
                    stage = stage_after(line, stage)
                errors = [log.message for log in await _logs(client, [failed.id], min_level=40)]
                for line in failure_lines(root, failed, errors, stage, error_lines, PREFECT_UI_URL.value()):
                    emit(line)
            return root


def follow(flow_run_id: Any, emit: Callable[[str], None] = print, interval: float = 5.0) -> RunView:
    """``follow_run`` for synchronous callers (the CLI)."""
    return asyncio.run(follow_run(flow_run_id, emit, interval))
