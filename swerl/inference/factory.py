"""Building an engine by name, for the CLI and the flows; heavy backends are imported only when chosen."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from swerl.inference.base import EngineError, InferenceEngine, SamplingConfig

EngineName = Literal["hf", "vllm", "openai", "scripted"]


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


def load_tokenizer(name_or_path: str | Path):
    require_local_model(name_or_path)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(name_or_path))
    except (OSError, ValueError) as e:
        raise EngineError(f"cannot load a tokenizer from {name_or_path!r}: {e}. Create a local model with `swerl model init-tiny --out DIR`.") from e


def make_engine(
    kind: EngineName,
    model: str | Path,
    *,
    sampling: SamplingConfig | None = None,
    tokenizer=None,
    base_url: str | None = None,
    max_context: int | None = None,
    policy_version: str = "0",
    scripts=None,
    torch_threads: int | None = None,
) -> InferenceEngine:
    """An engine of ``kind`` serving ``model``; ``scripts`` only for the scripted policy, ``torch_threads`` only for hf."""
    sampling = sampling or SamplingConfig()
    if kind == "hf":
        from swerl.inference.hf_engine import HFEngine, HFEngineConfig

        return HFEngine(model, sampling, HFEngineConfig(max_context=max_context, torch_threads=torch_threads), policy_version=policy_version)
    if kind == "vllm":
        from swerl.inference.vllm_engine import VLLMEngine, VLLMEngineConfig

        cfg = VLLMEngineConfig(max_model_len=max_context) if max_context else None
        return VLLMEngine(model, sampling, cfg, policy_version=policy_version)
    if kind == "openai":
        from swerl.inference.openai_engine import OpenAIEngine, OpenAIEngineConfig

        if not base_url:
            raise EngineError("--engine openai needs --base-url, e.g. http://127.0.0.1:8000/v1")
        cfg = OpenAIEngineConfig(max_context=max_context) if max_context else None
        return OpenAIEngine(base_url, str(model), sampling, cfg, tokenizer=tokenizer, policy_version=policy_version)
    if kind == "scripted":
        from swerl.inference.scripted import ScriptedEngine

        if scripts is None:
            raise EngineError("the scripted engine needs scripts")
        return ScriptedEngine(tokenizer, scripts, max_context=max_context or 32768)
    raise EngineError(f"unknown engine {kind!r}: choose hf, vllm, openai or scripted")
