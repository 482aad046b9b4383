"""A flow that finishes in a second, for tests/flows/test_schedule_fires.py: a schedule's run must
complete on the worker within the test, which no real swerl flow does without Docker and a model.

The worker loads it by path (`tests/support/schedule_flow.py:schedule_tick`) from the repository root.
"""

from __future__ import annotations

from prefect import flow


@flow(name="schedule-tick")
def schedule_tick(note: str = "tick") -> str:
    print(f"schedule-tick: {note}")
    return note
