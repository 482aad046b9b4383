"""The proximal log-probs of off-policy data: each action token's log-prob under the policy an update starts from.

Decoupled PPO (``swerl.rl.loss``) clips the update against this policy and weights each token by how much more
likely it finds the token than the (older) policy that sampled it. The update's own trainer computes them
(``Trainer.action_logprobs``) before its first step, while it holds the start's weights: on its device, in its
compute dtype, through ZeRO-3's partitions when the model fits only sharded, so the weight ``pi_prox / pi_behav``
and the ratio against ``pi_prox`` compare like with like. They are kept in the run folder: a resumed update reads
them back instead of recomputing them with the weights it has trained since.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from swerl.train.base import Trainer
from swerl.train.data import Row, to_batch
from swerl.train.run import first_process

PROX_FILE = "proximal_logprobs.json"


class ProximalPass:
    """The proximal log-probs of an update's ``stale`` rows (by trajectory id), read from ``out/proximal_logprobs.json``
    when an earlier attempt wrote them, else computed by the trainer it is handed (``train_run``'s
    ``before_training``); ``rows()`` then gives every row, the stale ones carrying theirs."""

    def __init__(self, rows: Sequence[Row], stale: set[str], out: Path) -> None:
        self._rows, self.stale, self.path = list(rows), set(stale), Path(out) / PROX_FILE
        self.values: dict[str, list[float]] | None = self._kept()

    def _kept(self) -> dict[str, list[float]] | None:
        if not self.path.is_file():
            return None
        kept = json.loads(self.path.read_text(encoding="utf-8"))
        return {tid: kept[tid] for tid in self.stale} if self.stale <= set(kept) else None

    def __call__(self, trainer: Trainer) -> None:
        """Compute what no earlier attempt kept, with ``trainer`` on the start's weights; the first process writes it."""
        if self.values is not None:
            return
        stale = [r for r in self._rows if r.example.trajectory_id in self.stale]
        logprobs = trainer.action_logprobs(to_batch(stale)) if stale else []
        self.values = {r.example.trajectory_id: [float(x) for x in lp] for r, lp in zip(stale, logprobs)}
        if first_process():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(self.values), encoding="utf-8")
            os.replace(tmp, self.path)

    def rows(self) -> list[Row]:
        """Every row, each stale one with its proximal log-probs; the pass must have run."""
        if self.values is None:
            raise RuntimeError("the proximal pass has not run: train_run calls it with the trainer before the first step")
        return [replace(r, prox_logprobs=self.values[r.example.trajectory_id]) if r.example.trajectory_id in self.values
                else r for r in self._rows]
