"""A table artifact a flow run keeps current: created once, then updated in place as rows arrive.

Prefect keeps every ``create_table_artifact`` call as an artifact of its own, so a table re-created after
each stage shows as that many cards on the run's page. Updating the first one (``PATCH /artifacts/{id}``,
which also moves the key's latest version) leaves one card that always holds every row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID


class LiveTable:
    """One table artifact under ``key`` for this flow run."""

    def __init__(self, key: str, description: str) -> None:
        self.key, self.description = key, description
        self.artifact_id: UUID | None = None

    def show(self, rows: Sequence[dict[str, Any]]) -> UUID:
        """Create the artifact with ``rows``, or replace the rows of the one this run created."""
        from prefect.artifacts import TableArtifact, create_table_artifact

        if self.artifact_id is None:
            self.artifact_id = create_table_artifact(table=list(rows), key=self.key, description=self.description)
            return self.artifact_id
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.actions import ArtifactUpdate

        with get_client(sync_client=True) as client:
            client.update_artifact(self.artifact_id, ArtifactUpdate(data=TableArtifact(table=list(rows)).format()))
        return self.artifact_id
