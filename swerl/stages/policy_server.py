"""One vLLM server for a whole pipeline run, when a sampler asks for it (``sampler.serve``).

``policy_server(params, model, run_dir)`` wraps the pipeline's body: it finds every
``SamplerConfig`` inside ``params`` (the pipeline's, RFT's, the warm start's) whose ``serve``
is set, starts one server for them all (``serve_vllm``: vLLM's OpenAI server with swerl's
reload extension) on the starting policy, and yields ``params`` with those samplers pointing
at it (``engine.base_url``, ``engine.served_model``; ``serve`` cleared), so that stages, chunks and Dask
workers see an ordinary ``base_url``. Each stage then reloads its own checkpoint in place
(``OpenAIEngine.ensure_policy``). The server stops when the block ends, whether the body
returned, raised or was cancelled (a SIGKILLed flow process takes it along: the server gets
SIGTERM when the thread that started it dies). Its output goes to ``RUN_DIR/policy-server.log``;
``RUN_DIR/policy-server.json`` says where it listened and its process group. A server that
cannot start raises ``VLLMServerError`` with the tail of that log, before any stage runs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from swerl.inference.config import VLLMServeConfig
from swerl.stages.errors import StageInputError
from swerl.rollout.sampler import SamplerConfig

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
SERVER_LOG = "policy-server.log"
SERVER_RECORD = "policy-server.json"


def _samplers(params: BaseModel) -> Iterator[SamplerConfig]:
    """Every SamplerConfig nested in ``params`` (itself included)."""
    if isinstance(params, SamplerConfig):
        yield params
    for name in type(params).model_fields:
        value = getattr(params, name)
        if isinstance(value, BaseModel):
            yield from _samplers(value)


def serve_config(params: BaseModel) -> VLLMServeConfig | None:
    """The one server the samplers in ``params`` ask for; None when none does, StageInputError when they disagree."""
    found: list[VLLMServeConfig] = []
    for sampler in _samplers(params):
        if sampler.serve is not None and sampler.serve not in found:
            found.append(sampler.serve)
    if len(found) > 1:
        raise StageInputError(f"the samplers ask for {len(found)} different policy servers ({found}); a pipeline starts one: "
                              "give every openai sampler the same serve settings (or an engine.base_url of its own)")
    remote = [s.dask_address for s in _samplers(params) if s.serve is not None and getattr(s, "dask_address", None)]
    if remote and _local_only(found[0].host):
        raise StageInputError(f"the rollout chunks run on the Dask cluster at {remote[0]}, whose workers cannot reach a policy "
                              f"server on {found[0].host}: set serve.host to this machine's address on the workers' private "
                              "network (e.g. 10.0.0.5)")
    return found[0] if found else None


def _local_only(host: str) -> bool:
    """Whether a URL on ``host`` is of no use to another machine (loopback, or the unspecified 0.0.0.0)."""
    try:
        address = ipaddress.ip_address(socket.gethostbyname(host))
    except OSError:
        return False  # the start will say what is wrong with it
    return address.is_loopback or address.is_unspecified


def _rewrite(params: M, change: Callable[[SamplerConfig], SamplerConfig]) -> M:
    updates = {name: _rewrite(value, change) for name in type(params).model_fields
               if isinstance(value := getattr(params, name), BaseModel)}
    out = params.model_copy(update=updates) if updates else params
    return change(out) if isinstance(out, SamplerConfig) else out


def pointed_at(params: M, base_url: str, served_model: str) -> M:
    """``params`` with every sampler that asked for the server using the one at ``base_url`` instead."""
    def change(sampler: SamplerConfig) -> SamplerConfig:
        if sampler.serve is None:
            return sampler
        engine = sampler.engine.model_copy(update={"base_url": base_url, "served_model": served_model})
        return sampler.model_copy(update={"serve": None, "engine": engine})

    return _rewrite(params, change)


@contextlib.contextmanager
def policy_server(params: M, model: str | Path, run_dir: Path) -> Iterator[M]:
    """Run the server ``params``' samplers ask for (on ``model``, the run's starting policy) for the ``with`` block;
    yield ``params`` pointing at it. Without a ``serve`` anywhere: yield ``params`` as they are, start nothing."""
    config = serve_config(params)
    if config is None:
        yield params
        return
    from swerl.inference.vllm_server import serve_vllm

    run_dir = Path(run_dir)
    start = str(model)
    import torch

    gpu = torch.cuda.is_available()
    eager = config.eager(on_cpu=not gpu)
    dtype = config.vllm_dtype(on_cpu=not gpu)
    with serve_vllm(start, config.port, config.extra_args, startup_timeout_s=config.ready_timeout_s, host=config.host,
                    served_model_name=config.served_model_name, dtype=dtype, max_model_len=config.max_model_len,
                    enforce_eager=eager, chunked_prefill=config.chunked(on_cpu=not gpu), cpu_kv_cache_gib=max(1, round(config.cpu_kv_cache_gib)),
                    log_path=run_dir / SERVER_LOG) as url:
        record = {"url": str(url), "pid": url.pid, "model": start, "served_model": config.served_model_name, "log": str(url.log_path)}
        (run_dir / SERVER_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        log.info("policy server for the run: %s serves %s as %r (log %s)", url, start, config.served_model_name, url.log_path)
        yield pointed_at(params, str(url), config.served_model_name)
