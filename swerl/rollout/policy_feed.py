"""A rollout that follows the trainer: the checkpoints an asynchronous pipeline makes while a rollout samples are
loaded into the rollout's engine as they land.

The pipeline announces each new policy on a feed, one JSON line per checkpoint (``announce``), after the checkpoint
is complete on disk. A rollout started on an older policy follows the feed (``FeedFollower``): a newer entry is
loaded with the engine's ``load_weights``, which waits for the requests in flight, so every turn is sampled by one
policy and records it (``Turn.policy_version``); a trajectory that spans a reload is as stale as its oldest turn
(partial rollouts, ``swerl.rl.staleness``). On a server shared by several rollouts and the evaluations (the pipeline's
policy server, Dask workers' chunks: ``SharedServerEngine``), the first client to see the new policy reloads it and
the others find it served (``ensure_policy``): one reload per policy. Until a client sees it, its turns keep the older
label: a turn is never labelled newer than the weights that sampled it, so staleness is never under-counted; and a
following rollout starts from the feed's newest policy, never moving the server back (``starting_policy``). A
reload that fails leaves the engine on its old weights: the rollout goes on, its data older than it could be (an
off-policy update drops what is beyond its bound), and the failure is counted, never silent.

A file, not a queue: a Dask worker on another host reads it from the run folder like the rest of the run's data,
and a resumed run finds the policies an earlier attempt announced.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from swerl.inference.base import EngineError, InferenceEngine, SharedServerEngine
from swerl.rl.staleness import StalenessError, version_index

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeedEntry:
    """One announced policy: its version and its checkpoint folder."""

    version: str
    checkpoint: Path


def announce(feed: Path, version: str, checkpoint: Path) -> None:
    """Append ``version`` at ``checkpoint`` to ``feed`` (one whole line, flushed to disk before it is read)."""
    version_index(version)  # a version with no place in the order could never be compared: refuse it here
    feed.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"version": version, "checkpoint": str(checkpoint), "time": time.time()}) + "\n"
    with feed.open("a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def newest(feed: Path) -> FeedEntry | None:
    """The newest policy on ``feed`` in the pipeline's order (None: no feed, or nothing announced yet). A line cut
    short by a crash is skipped."""
    try:
        lines = feed.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    best: FeedEntry | None = None
    for line in lines:
        try:
            entry = json.loads(line)
            found = FeedEntry(entry["version"], Path(entry["checkpoint"]))
            # ties (the policies before DAPO share a place): the one announced last
            if best is None or version_index(found.version) >= version_index(best.version):
                best = found
        except (ValueError, KeyError, TypeError):
            continue
    return best


def starting_policy(feed: Path | None, model: str, version: str) -> tuple[str, str]:
    """What a rollout following ``feed`` starts with: its own ``(model, version)``, or the feed's newest policy when that
    is newer (a rollout resumed, or a chunk started after the update beside it landed)."""
    entry = newest(feed) if feed is not None else None
    try:
        if entry is not None and version_index(entry.version) > version_index(version):
            return str(entry.checkpoint), entry.version
    except StalenessError:  # a policy outside the pipeline's order starts as given and is not followed
        pass
    return model, version


@dataclass
class FollowRecord:
    """What a follower did: the policies it loaded (version, seconds the reload took), those it found a shared server
    serving already (another client reloaded it), and the reloads that failed."""

    loaded: list[tuple[str, float]] = field(default_factory=list)
    found_served: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


class FeedFollower:
    """Loads each newer policy announced on ``feed`` into ``engine`` while a rollout runs (a context manager: a
    thread polls the feed every ``poll_s`` seconds and stops when the block ends)."""

    def __init__(self, feed: Path, engine: InferenceEngine, poll_s: float = 1.0) -> None:
        self.feed, self.engine, self.poll_s = Path(feed), engine, poll_s
        self.record = FollowRecord()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="swerl-feed-follower", daemon=True)

    def __enter__(self) -> FeedFollower:
        self.poll()  # a policy announced before the rollout started is loaded before its first request
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def poll(self) -> None:
        """Load the feed's newest policy if it is newer than the engine's (and did not fail before)."""
        entry = newest(self.feed)
        if entry is None or entry.version in {v for v, _ in self.record.failed}:
            return
        try:
            if version_index(entry.version) <= version_index(self.engine.policy_version):
                return
        except StalenessError as e:  # an engine serving a policy outside the pipeline's order is not followed
            self.record.failed.append((entry.version, str(e)))
            return
        t0 = time.monotonic()
        try:
            if isinstance(self.engine, SharedServerEngine):  # another client may have loaded it already
                if not self.engine.ensure_policy(entry.checkpoint, entry.version):
                    self.record.found_served.append(entry.version)
            else:
                self.engine.load_weights(entry.checkpoint, entry.version)
        except EngineError as e:
            log.warning("could not load %s from %s: %s; sampling goes on with %s", entry.version, entry.checkpoint, e,
                        self.engine.policy_version)
            self.record.failed.append((entry.version, str(e)))
            return
        self.record.loaded.append((entry.version, time.monotonic() - t0))
        log.info("now sampling %s (loaded in %.1f s)", entry.version, self.record.loaded[-1][1])
