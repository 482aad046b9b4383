"""The thread that drives a vLLM engine, over a fake engine (no vLLM needed): requests decode together and
finish with their log-probs, a second reload waiting behind a first is refused, a stop fails what still waits."""

from __future__ import annotations

import concurrent.futures
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from swerl.inference.base import EngineError, GenerationRequest
from swerl.inference.vllm_thread import EngineThread


class FakeEngine:
    """Finishes every request at its next step with one token (7, log-prob -0.5); ``hold`` keeps them running."""

    def __init__(self) -> None:
        self.running: list[str] = []
        self.hold = threading.Event()
        self.reloads: list[tuple] = []

    def add_request(self, engine_id, prompt, params) -> None:
        self.running.append(engine_id)

    def abort_request(self, ids) -> None:
        self.running = [i for i in self.running if i not in ids]

    def step(self) -> list:
        if self.hold.is_set():
            return []
        done, self.running = self.running, []
        completion = SimpleNamespace(token_ids=[7], logprobs=[{7: SimpleNamespace(logprob=-0.5)}], finish_reason="length",
                                     stop_reason=None)
        return [SimpleNamespace(request_id=i, finished=True, outputs=[completion], num_cached_tokens=None) for i in done]

    def collective_rpc(self, method, timeout, args) -> None:
        self.reloads.append(args)

    def reset_prefix_cache(self) -> bool:
        return True


def _thread(engine: FakeEngine) -> tuple[EngineThread, threading.Event]:
    exited = threading.Event()
    thread = EngineThread(engine, lambda prompt_token_ids: prompt_token_ids, model_path="m0", policy_version="v0",
                          weight_load_timeout_s=5, on_exit=exited.set)
    return thread, exited


def _wait_for(condition) -> None:
    for _ in range(1000):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the engine thread did not get there")


def _request(i: int) -> GenerationRequest:
    return GenerationRequest(request_id=f"r{i}", prompt_ids=[1, 2], max_new_tokens=1)


def test_requests_finish_with_their_tokens_and_log_probs_and_a_reload_serves_the_new_policy():
    engine = FakeEngine()
    thread, exited = _thread(engine)
    try:
        gens = [f.result(timeout=10) for f in [thread.submit(_request(i), SimpleNamespace()) for i in range(3)]]
        assert [(g.request_id, g.token_ids, g.logprobs, g.finish_reason, g.policy_version) for g in gens] == [
            (f"r{i}", [7], [-0.5], "length", "v0") for i in range(3)]
        assert thread.reload(Path("m1"), "v1", timeout_s=5).result(timeout=10) is None
        assert (thread.model_path, thread.policy_version, engine.reloads) == ("m1", "v1", [("m1",)])
        assert thread.submit(_request(9), SimpleNamespace()).result(timeout=10).policy_version == "v1"
    finally:
        thread.stop(timeout_s=10)
    assert exited.is_set() and thread.dead is None


def test_a_second_reload_is_refused_and_a_stop_fails_what_still_waits():
    engine = FakeEngine()
    engine.hold.set()  # the first request never finishes, so the reload waits behind it
    thread, exited = _thread(engine)
    running = thread.submit(_request(0), SimpleNamespace())
    _wait_for(lambda: engine.running)
    first = thread.reload(Path("m1"), "v1", timeout_s=5)
    second = thread.reload(Path("m2"), "v2", timeout_s=5)
    with pytest.raises(EngineError, match="another load_weights is in progress"):
        second.result(timeout=10)
    waiting = thread.submit(_request(1), SimpleNamespace())  # behind the reload
    thread.stop(timeout_s=10)
    assert exited.is_set()
    for future in (running, first, waiting):
        with pytest.raises(EngineError, match=r"the vllm engine stopped \(closed\)"):
            future.result(timeout=10)
    assert engine.reloads == [] and thread.policy_version == "v0"


def test_a_cancelled_request_is_aborted_in_the_engine():
    engine = FakeEngine()
    engine.hold.set()
    thread, _ = _thread(engine)
    try:
        future = thread.submit(_request(0), SimpleNamespace())
        _wait_for(lambda: engine.running)
        assert engine.running == ["r0#1"]  # the engine's id: request ids may repeat across calls
        assert future.cancel()
        _wait_for(lambda: not engine.running)
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(timeout=0)
    finally:
        thread.stop(timeout_s=10)
