"""State hooks shared by the flows: a cancelled or crashed run leaves no sandbox behind."""

from __future__ import annotations

from typing import Any


def container_label(name: str) -> str:
    """The Docker label value (swerl run id) of every sandbox a pipeline starts."""
    return f"pipeline-{name}"


def reap_run_containers(flow: Any, flow_run: Any, state: Any) -> None:
    """Remove this run's sandboxes, and any whose owner process died (a crashed worker)."""
    from swerl.envs.docker_sandbox import reap_containers

    params = getattr(flow_run, "parameters", None) or {}
    p = params.get("params") or {}
    name = p.get("name") if isinstance(p, dict) else getattr(p, "name", None)
    label = params.get("container_label") or (container_label(name) if name else None)
    try:
        if label:
            reap_containers(run_id=label)
        reap_containers()
    except Exception as e:  # noqa: BLE001 - a hook must not mask the state it reacts to
        print(f"sandbox clean-up failed: {type(e).__name__}: {e}")


HOOKS = dict(on_cancellation=[reap_run_containers], on_crashed=[reap_run_containers])
