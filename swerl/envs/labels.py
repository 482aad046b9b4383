"""Labels that mark everything swerl creates in Docker, so it can be found and reaped."""

from __future__ import annotations

import os
import socket

MANAGED = "swerl.managed"
OWNER_PID = "swerl.owner_pid"
OWNER_HOST = "swerl.owner_host"
EXPIRES_AT = "swerl.expires_at"
RUN_ID = "swerl.run_id"
KIND = "swerl.kind"
INSTANCE_ID = "swerl.instance_id"
CONTENT_HASH = "swerl.content_hash"


def owner_labels(run_id: str | None = None) -> dict[str, str]:
    labels = {MANAGED: "1", OWNER_PID: str(os.getpid()), OWNER_HOST: socket.gethostname()}
    if run_id:
        labels[RUN_ID] = run_id
    return labels
