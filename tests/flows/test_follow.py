"""`swerl follow` against a real Prefect API: a tiny flow that talks like the pipeline (its
stage lines through the pipeline's own `say`) and whose `eval-rft` subflow fails. The
follower prints those lines and the state changes a person needs, no raw events, and ends
with the failure's reason."""

from __future__ import annotations

import contextvars
import re
import threading
import time
import uuid

import pytest
from prefect import flow, task

from swerl.orchestration.follow import say

pytestmark = [pytest.mark.slow]

REASON = "ValueError: every task in t.jsonl failed validation; see the validation report v.json"
CLOCK = re.compile(r"^\d\d:\d\d:\d\d  ")
STARTED: dict[str, str] = {}  # token -> flow run id (a flow's parameters are copies: a list passed in stays empty)


@task
def keep_valid_tasks() -> None:
    raise ValueError(REASON.removeprefix("ValueError: "))


@flow(name="evaluate")
def failing_stage() -> None:
    keep_valid_tasks()


@flow(name="tiny-pipeline", flow_run_name="pipeline-tiny")
def tiny_pipeline(token: str, fail: bool = True) -> None:
    from prefect.runtime import flow_run

    STARTED[token] = flow_run.id
    say("images: started")
    time.sleep(3)  # the follower sees the run under way
    say("images (3s): 3 images ready for the training tasks (0 built, 3 reused)")
    if fail:
        say("eval-rft: started")
        failing_stage.with_options(flow_run_name="eval-rft")()


def _run_in_background(fail: bool) -> tuple[str, threading.Thread]:
    token = uuid.uuid4().hex
    context = contextvars.copy_context()  # the test server's settings live in a context variable
    thread = threading.Thread(target=lambda: context.run(tiny_pipeline, token, fail, return_state=True), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while token not in STARTED and time.monotonic() < deadline:
        time.sleep(0.1)
    assert token in STARTED, "the flow never started"
    return STARTED[token], thread


def test_the_follower_prints_stage_lines_and_ends_with_the_failures_reason(prefect_api):
    from swerl.orchestration.follow import follow

    run_id, thread = _run_in_background(fail=True)
    lines: list[str] = []
    final = follow(run_id, emit=lines.append, interval=0.5)
    thread.join(30)
    assert final.state_type == "FAILED"
    report = next(i for i, line in enumerate(lines) if line.startswith("--- the end of"))
    # progress lines carry a clock and come in time order; the failure report that ends the output has none
    assert all(CLOCK.match(line) for line in lines[:report]) and not any(CLOCK.match(line) for line in lines[report:])
    told = [CLOCK.sub("", line) for line in lines[:report]]
    assert told[0] == "pipeline-tiny: Running"
    assert told[1:4] == ["images: started", "images (3s): 3 images ready for the training tasks (0 built, 3 reused)",
                         "eval-rft: started"]
    assert [re.sub(r"\d+s$", "Ns", t) for t in told[4:]] == ["eval-rft: Failed after Ns", "pipeline-tiny: Failed after Ns"]
    report_lines = lines[report:]
    assert f"  {REASON}" in report_lines  # the traceback's last line, from the failed subflow's error log
    assert re.fullmatch(r"more: prefect flow-run logs ([0-9a-f-]{36}); http://127.0.0.1:\d+/runs/flow-run/\1",
                        report_lines[-2])
    print("\n".join(lines))  # the sample in a failure's report
    assert report_lines[-1] == f"pipeline-tiny failed in stage eval-rft: {REASON}"


def test_swerl_follow_exits_1_with_the_reason_last_and_0_for_a_completed_run(prefect_api):
    from typer.testing import CliRunner

    from swerl.cli import app

    failed_id, thread = _run_in_background(fail=True)
    thread.join(60)
    result = CliRunner().invoke(app, ["follow", str(failed_id), "--interval", "0.5"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[-1] == f"pipeline-tiny failed in stage eval-rft: {REASON}"

    done_id, thread = _run_in_background(fail=False)
    thread.join(60)
    result = CliRunner().invoke(app, ["follow", str(done_id), "--interval", "0.5"])
    assert result.exit_code == 0, result.output
    assert [CLOCK.sub("", line) for line in result.output.splitlines()][-2:] == [
        "images (3s): 3 images ready for the training tasks (0 built, 3 reused)",
        result.output.splitlines()[-1][10:]]
    assert re.fullmatch(r"pipeline-tiny: Completed after \d+s", CLOCK.sub("", result.output.splitlines()[-1]))
    bad = CliRunner().invoke(app, ["follow", "not-a-uuid"])
    assert bad.exit_code == 2 and "'not-a-uuid' is not a flow run id (a UUID)" in bad.output
