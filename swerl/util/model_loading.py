"""Loading a transformers model, one at a time per process.

``from_pretrained`` builds the model under process-wide patches (transformers 5 swaps ``torch.nn.init`` functions
and ``torch.linspace`` while it initialises on the meta device, and puts them back after). Two loads in two threads
of one process (an asynchronous pipeline's rollout loading its policy while the trainer loads the update's start)
then undo each other's patches: a load ends with tensors still on the meta device ("Cannot copy out of meta
tensor"). Every load in swerl goes through ``load_causal_lm``, which holds one lock for the load.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

LOAD_LOCK = threading.RLock()


def load_causal_lm(model_dir: str | Path, **kwargs: Any):
    """``AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)``, no other load running in this process meanwhile."""
    from transformers import AutoModelForCausalLM

    with LOAD_LOCK:
        return AutoModelForCausalLM.from_pretrained(str(model_dir), **kwargs)
