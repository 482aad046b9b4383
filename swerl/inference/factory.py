"""The one place that turns an ``EngineConfig`` into an engine, and the model-path checks every
engine shares; a backend (torch, vLLM, httpx) is imported only when its engine is made."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from swerl.inference.base import EngineError, InferenceEngine, SamplingConfig
from swerl.inference.config import EngineConfig, HFEngineConfig, OpenAIEngineConfig, ScriptedEngineConfig, VLLMEngineConfig

if TYPE_CHECKING:
    from swerl.inference.scripted import Scripts


def looks_local(name_or_path: str | Path) -> bool:
    """Whether ``name_or_path`` names a folder on this machine rather than a hub repository.

    Hub ids are ``NAME`` or ``ORG/NAME``; anything absolute, starting with ``.``/``~``, with
    more than one separator, or whose first part is a folder here (``runs/model``) is a path.
    """
    ref = str(name_or_path)
    if isinstance(name_or_path, Path) or ref.startswith(("/", "~", "./", "../", f".{os.sep}", f"..{os.sep}")):
        return True
    parts = ref.replace(os.sep, "/").split("/")
    if len(parts) > 2 or "" in parts or ref in (".", ".."):
        return True
    return len(parts) == 2 and Path(parts[0]).is_dir()


def require_local_model(name_or_path: str | Path) -> None:
    """Fail at once on a local-looking model path that does not exist.

    Without this, transformers takes the path for a hub id and retries the (offline) hub for
    about a minute before a message that never names the path.
    """
    if looks_local(name_or_path) and not Path(name_or_path).expanduser().exists():
        raise EngineError(f"model path {str(name_or_path)!r} does not exist (looked for {Path(name_or_path).expanduser().resolve()}); "
                          "give an existing model folder (e.g. from `swerl model init-tiny --out DIR`) or a hub id such as "
                          "ORG/NAME")


HUB_PROBE_TIMEOUT_S = 5.0


def require_model(name_or_path: str | Path, probe_timeout_s: float = HUB_PROBE_TIMEOUT_S) -> None:
    """Fail in seconds on a model that is neither a local folder nor a hub id this machine can fetch.

    A local-looking path must exist (``require_local_model``). A bare ``NAME`` or ``ORG/NAME`` that
    is no folder here must be in the Hugging Face cache or answer one probe of the hub; otherwise
    transformers retries the hub for minutes and its message never says no local folder was found.
    """
    require_local_model(name_or_path)
    ref = str(name_or_path)
    if Path(ref).expanduser().exists():
        return
    try:
        from huggingface_hub import HfApi, try_to_load_from_cache
        from huggingface_hub.constants import HF_HUB_OFFLINE
    except ImportError:  # transformers needs it; without it there is nothing to load with anyway
        return
    if isinstance(try_to_load_from_cache(ref, "config.json"), str):
        return
    if HF_HUB_OFFLINE:
        why = "HF_HUB_OFFLINE is set and it is not in the Hugging Face cache"
    else:
        try:
            HfApi().model_info(ref, timeout=probe_timeout_s)
            return
        except Exception as e:  # noqa: BLE001 - unreachable, unknown or gated: each is the same answer here
            why = f"the Hugging Face hub did not answer for it ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
    raise EngineError(f"model {ref!r} is neither a local folder (looked for {Path(ref).expanduser().resolve()}) nor a hub "
                      f"model this machine can fetch: {why}. Give an existing model folder (e.g. from `swerl model "
                      "init-tiny --out DIR`), or a hub id once the hub is reachable")


def load_tokenizer(name_or_path: str | Path):
    require_model(name_or_path)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(name_or_path))
    except (OSError, ValueError) as e:
        raise EngineError(f"cannot load a tokenizer from {name_or_path!r}: {e}. Create a local model with `swerl model init-tiny --out DIR`.") from e


def _hf(config, sampling, policy_version, tokenizer, scripts) -> InferenceEngine:
    from swerl.inference.hf_engine import HFEngine

    return HFEngine(config, sampling, policy_version=policy_version)


def _vllm(config, sampling, policy_version, tokenizer, scripts) -> InferenceEngine:
    from swerl.inference.vllm_engine import VLLMEngine

    return VLLMEngine(config, sampling, policy_version=policy_version)


def _openai(config, sampling, policy_version, tokenizer, scripts) -> InferenceEngine:
    from swerl.inference.openai_engine import OpenAIEngine

    return OpenAIEngine(config, sampling, tokenizer=tokenizer, policy_version=policy_version)


def _scripted(config, sampling, policy_version, tokenizer, scripts) -> InferenceEngine:
    from swerl.inference.scripted import ScriptedEngine

    if scripts is None or tokenizer is None:
        raise EngineError("the scripted engine replays scripts through a tokenizer: pass scripts= (e.g. "
                          "swerl.inference.scripted.demonstrations(...)) and tokenizer=")
    return ScriptedEngine(tokenizer, scripts, config, sampling=sampling)


_MAKERS = {HFEngineConfig: _hf, VLLMEngineConfig: _vllm, OpenAIEngineConfig: _openai, ScriptedEngineConfig: _scripted}


def make_engine(config: EngineConfig, *, sampling: SamplingConfig | None = None, policy_version: str = "0", tokenizer=None,
                scripts: Scripts | None = None) -> InferenceEngine:
    """The engine ``config`` describes (its ``kind`` chooses), sampling as ``sampling`` says.

    ``policy_version``: the version of the weights served, tagged onto every Generation (a
    scripted policy is no checkpoint: it records ``scripted``). ``tokenizer``: re-tokenizes a
    text-only server's answers (openai), encodes the replies (scripted, required). ``scripts``:
    the scripted policy's replies, required for it and for it only.
    """
    maker = _MAKERS.get(type(config))
    if maker is None:
        raise TypeError(f"no engine for {type(config).__name__}; known kinds: hf, vllm, openai, scripted")
    if scripts is not None and not isinstance(config, ScriptedEngineConfig):
        raise EngineError(f"scripts are for the scripted engine, not {config.kind}")
    return maker(config, sampling or SamplingConfig(), policy_version, tokenizer, scripts)
