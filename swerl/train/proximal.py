"""The proximal log-probs of off-policy data: each action token's log-prob under the policy an update starts from.

Decoupled PPO (``swerl.rl.loss``) clips the update against this policy and weights each token by how much more
likely it finds the token than the (older) policy that sampled it. They are computed once, before the update's
first step, and kept in the run folder: a resumed update reads them back instead of recomputing them with the
weights it has trained since. They are computed where and as the trainer computes its own forward pass (its device,
float32 weights under its compute dtype's autocast: bfloat16 on a GPU), so the weight ``pi_prox / pi_behav`` and the
ratio against ``pi_prox`` compare like with like; on one process, so a model that fits only sharded (ZeRO-3 across
GPUs) does not fit here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from swerl.train.data import Row

PROX_FILE = "proximal_logprobs.json"


def proximal_logprobs(model: str | Path, rows: Sequence[Row], out: Path, chunk_size: int = 1024,
                      device: str = "auto", dtype: str = "auto") -> dict[str, list[float]]:
    """``{trajectory_id: log-probs}`` of ``rows`` under ``model`` (the layout of ``old_logprobs``: 0 off the action
    tokens), read from ``out/proximal_logprobs.json`` when an earlier attempt wrote them for these rows; ``device``
    and ``dtype``: the trainer's settings ('auto': the first GPU if any, else the CPU; bfloat16 autocast on a GPU)."""
    from swerl.util.model_loading import load_causal_lm

    from swerl.rl.logprobs import sequence_action_logprobs

    path = Path(out) / PROX_FILE
    wanted = [r.example.trajectory_id for r in rows]
    if path.is_file():
        kept = json.loads(path.read_text(encoding="utf-8"))
        if set(wanted) <= set(kept):
            return {tid: kept[tid] for tid in wanted}
    from swerl.train.step import compute_dtype, resolve_device

    where = resolve_device(device)
    autocast = compute_dtype(dtype, where)
    policy = load_causal_lm(model, dtype=torch.float32).to(where).eval()
    found: dict[str, list[float]] = {}
    with torch.no_grad(), torch.autocast(where.type, dtype=autocast, enabled=autocast != torch.float32):
        for row in rows:
            ids = torch.tensor([row.example.input_ids], device=where)
            mask = torch.tensor([row.example.action_mask], device=where).bool()
            logprobs, _ = sequence_action_logprobs(policy, ids, mask, chunk_size, 1.0, torch.ones_like(ids))
            found[row.example.trajectory_id] = [float(x) for x in logprobs[0].cpu()]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(found), encoding="utf-8")
    os.replace(tmp, path)
    return found
