"""The one thread that drives a ``vllm.LLMEngine``.

vLLM's engine is not thread-safe: this thread is its only caller. Requests and weight
reloads arrive through a queue; the thread adds every pending request between two
``step()`` calls, so all the trajectories waiting on the engine decode together and a new
request joins the running batch at the next step. A reload runs once the requests that
started before it have finished; requests submitted meanwhile wait and run on the new
weights. Callers only ever see ``concurrent.futures.Future``s, so any thread or event loop
may wait on them.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swerl.inference.base import EngineError, Generation, GenerationRequest
from swerl.inference.vllm_worker import RELOAD

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    request: GenerationRequest
    params: Any  # vllm.SamplingParams
    future: concurrent.futures.Future
    engine_id: str = ""
    policy_version: str = ""
    started: float = field(default_factory=time.perf_counter)


@dataclass
class _Reload:
    path: Path
    policy_version: str
    deadline: float
    future: concurrent.futures.Future


class EngineThread:
    """Owns ``engine`` (a ``vllm.LLMEngine``) from now on; ``on_exit`` runs when the thread stops.

    ``model_path`` and ``policy_version`` are what it serves, changed only by a reload that
    succeeded; ``dead`` says why it stopped serving, if it did.
    """

    def __init__(self, engine, tokens_prompt: Callable[..., Any], *, model_path: str, policy_version: str,
                 weight_load_timeout_s: float, on_exit: Callable[[], None]) -> None:
        self.engine = engine
        self.model_path = model_path
        self.policy_version = policy_version
        self.dead: str | None = None
        self.stats = {"steps": 0, "requests": 0, "max_running": 0, "weight_loads": 0}
        self._tokens_prompt = tokens_prompt  # vllm.TokensPrompt
        self._weight_load_timeout_s = weight_load_timeout_s
        self._on_exit = on_exit
        self._inbox: queue.Queue = queue.Queue()
        self._counter = 0
        self._thread = threading.Thread(target=self._run, name="swerl-vllm-engine", daemon=True)
        self._thread.start()

    def submit(self, request: GenerationRequest, params) -> concurrent.futures.Future:
        """Generate for ``request`` with ``params`` (``vllm.SamplingParams``); cancel the future to abort it."""
        pending = _Pending(request, params, concurrent.futures.Future())
        self._inbox.put(pending)
        return pending.future

    def reload(self, path: Path, policy_version: str, timeout_s: float) -> concurrent.futures.Future:
        """Serve ``path`` once the requests in flight finish; cancelling the future before it starts withdraws it."""
        job = _Reload(path, policy_version, time.monotonic() + timeout_s, concurrent.futures.Future())
        self._inbox.put(job)
        return job.future

    def stop(self, timeout_s: float) -> None:
        """Fail what still waits, stop the thread (it runs ``on_exit`` on its way out) and wait up to ``timeout_s``."""
        self._inbox.put(None)
        self._thread.join(timeout=timeout_s)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout=timeout_s)

    # ----- the loop --------------------------------------------------------------------------
    def _run(self) -> None:
        running: dict[str, _Pending] = {}
        waiting: list[_Pending] = []  # submitted while a reload waits for the running ones
        reload: _Reload | None = None
        try:
            while True:
                # 1) take what was submitted (block only when there is nothing to step)
                reload, stop = self._take(not running and not waiting and reload is None, waiting, reload)
                if stop:
                    break
                # 2) a reload runs once the requests that started before it have finished
                if reload is not None:
                    if reload.future.cancelled():
                        reload = None
                    elif not running:
                        self._do_reload(reload)
                        reload = None
                        if self.dead:
                            break
                if reload is None:
                    for p in waiting:
                        self._admit(p, running)
                    waiting = []
                self._step(running)
        except Exception as e:  # vLLM died (EngineDeadError) or a bug: fail everything, loudly
            log.exception("vLLM engine thread failed")
            self.dead = f"{type(e).__name__}: {e}"
        finally:
            self._fail_all([*running.values(), *waiting], reload)
            self._on_exit()

    def _take(self, block: bool, waiting: list[_Pending], reload: _Reload | None) -> tuple[_Reload | None, bool]:
        """Queue the submitted requests on ``waiting``; return the reload to run and whether to stop.

        Everything drained is taken even after a stop, so that the exit fails it rather than drops it."""
        stop = False
        for item in self._drain(block):
            if item is None:
                stop = True
            elif isinstance(item, _Reload):
                if reload is not None:
                    _fail(item.future, EngineError("another load_weights is in progress"))
                else:
                    reload = item
            else:
                waiting.append(item)
        return reload, stop

    def _step(self, running: dict[str, _Pending]) -> None:
        """Release the requests whose callers gave up, then one engine step for everything running."""
        # callers that gave up (cancelled / timed out) release their slot
        gone = [eid for eid, p in running.items() if p.future.cancelled()]
        if gone:
            self.engine.abort_request(gone)
            for eid in gone:
                running.pop(eid)
        if running:
            self.stats["max_running"] = max(self.stats["max_running"], len(running))
            outputs = self.engine.step()
            self.stats["steps"] += 1
            for out in outputs:
                if out.finished and out.request_id in running:
                    self._finish(running.pop(out.request_id), out)

    def _fail_all(self, pending: list[_Pending], reload: _Reload | None) -> None:
        """The thread is stopping: fail every request and reload still waiting on it, queued ones too."""
        err = EngineError(f"the vllm engine stopped ({self.dead or 'closed'})")
        for p in pending:
            _fail(p.future, err)
        if reload is not None:
            _fail(reload.future, err)
        for item in self._drain(block=False):
            if item is not None:
                _fail(item.future, err)

    def _drain(self, block: bool) -> list:
        items = []
        try:
            if block:
                items.append(self._inbox.get(timeout=0.5))
            while True:
                items.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        return items

    def _admit(self, p: _Pending, running: dict[str, _Pending]) -> None:
        if p.future.cancelled():
            return
        self._counter += 1
        p.engine_id = f"{p.request.request_id}#{self._counter}"  # request ids may repeat across calls
        p.policy_version = self.policy_version
        try:
            self.engine.add_request(p.engine_id, self._tokens_prompt(prompt_token_ids=list(p.request.prompt_ids)), p.params)
        except Exception as e:  # a request vLLM refuses fails alone
            _fail(p.future, EngineError(f"vLLM refused request {p.request.request_id}: {type(e).__name__}: {e}"))
            return
        running[p.engine_id] = p
        self.stats["requests"] += 1

    def _finish(self, p: _Pending, out) -> None:
        c = out.outputs[0]
        ids = list(c.token_ids)
        try:
            if c.logprobs is None or len(c.logprobs) != len(ids):
                raise EngineError(f"vLLM returned {0 if c.logprobs is None else len(c.logprobs)} log-probs for {len(ids)} tokens")
            lps = [float(pos[t].logprob) for t, pos in zip(ids, c.logprobs)]
            if c.finish_reason == "stop":
                if not ids or ids[-1] not in p.params.stop_token_ids:
                    raise EngineError(f"vLLM stopped on {ids[-1:]} which is not a stop token of the request")
                reason = "stop"
            elif c.finish_reason == "length":
                reason = "length"
            else:
                raise EngineError(f"vLLM finished with {c.finish_reason!r} ({c.stop_reason!r})")
        except EngineError as e:
            _fail(p.future, EngineError(f"request {p.request.request_id}: {e}"))
            return
        gen = Generation(
            request_id=p.request.request_id,
            token_ids=ids,
            logprobs=lps,
            finish_reason=reason,  # type: ignore[arg-type]
            policy_version=p.policy_version,
            extra={"latency_s": time.perf_counter() - p.started, "cached_prompt_tokens": out.num_cached_tokens or 0},
        )
        if not p.future.cancelled():
            try:
                p.future.set_result(gen)
            except concurrent.futures.InvalidStateError:
                pass

    def _do_reload(self, job: _Reload) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        previous = self.model_path
        remaining = max(1.0, job.deadline - time.monotonic())
        try:
            self.engine.collective_rpc(RELOAD, timeout=remaining, args=(str(job.path),))
        except Exception as e:
            # The model may be half-loaded: put the previous weights back, or give up on it.
            try:
                self.engine.collective_rpc(RELOAD, timeout=self._weight_load_timeout_s, args=(previous,))
                self.engine.reset_prefix_cache()
                state = f"still serving {previous} (policy {self.policy_version})"
            except Exception as e2:
                self.dead = f"a failed weight load left the model broken ({type(e2).__name__}: {e2})"
                state = "the engine is unusable now"
            job.future.set_exception(EngineError(f"load_weights({job.path}) failed: {type(e).__name__}: {e}; {state}"))
            return
        # cached KV blocks were computed by the old weights
        if not self.engine.reset_prefix_cache():
            log.warning("vLLM did not reset its prefix cache after load_weights(%s)", job.path)
        self.model_path = str(job.path)
        self.policy_version = job.policy_version
        self.stats["weight_loads"] += 1
        job.future.set_result(None)


def _fail(future: concurrent.futures.Future, error: Exception) -> None:
    if future.cancelled():
        return
    try:
        future.set_exception(error)
    except concurrent.futures.InvalidStateError:
        pass
