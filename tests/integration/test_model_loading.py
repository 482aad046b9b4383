"""Models load correctly while another thread of the process loads one too (an asynchronous pipeline's rollout and
trainer): transformers patches process-wide functions during a load, so swerl's loads take turns."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from swerl.util.model_loading import load_causal_lm


def test_loads_in_four_threads_at_once_all_end_with_the_checkpoint_s_weights(tiny_model_dir):
    with ThreadPoolExecutor(4) as pool:
        models = list(pool.map(lambda _: load_causal_lm(tiny_model_dir, dtype=torch.float32), range(8)))
    reference = models[0].state_dict()
    for model in models:
        state = model.state_dict()
        assert all(t.device.type == "cpu" for t in state.values())
        assert all(torch.equal(state[k], reference[k]) for k in reference)
