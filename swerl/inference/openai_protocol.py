"""The wire format of ``POST /v1/completions``: the request body swerl sends and the parsing of
the answer, as pure functions.

Token ids go in as ``prompt`` (a list of ids is legal there) and, with vLLM's extensions,
token ids and their log-probs come back exactly: ``return_token_ids`` gives
``choices[0].token_ids`` and ``return_tokens_as_token_ids`` spells every entry of
``logprobs.tokens`` as ``"token_id:123"``. Every sampling field is sent explicitly, so a
server's defaults, including a checkpoint's generation_config.json, cannot reshape the
distribution. A server that returns only text still works: the text is re-tokenized and the
result says ``exact_ids=False``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from swerl.inference.base import EngineError, RequestLimits, SamplingConfig

TOKEN_ID_PREFIX = "token_id:"


def completion_body(
    model: str, prompt_ids: list[int], sampling: SamplingConfig, limits: RequestLimits, *, vllm_extensions: bool = True
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/completions`` that continues ``prompt_ids`` within ``limits``."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": limits.max_tokens,
        "n": 1,
        "stream": False,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "logprobs": 0 if vllm_extensions else 1,  # vLLM: 0 = only the sampled token's log-prob
    }
    if limits.seed is not None:
        body["seed"] = limits.seed
    if vllm_extensions:
        body.update(
            top_k=sampling.top_k,  # 0 disables it in vLLM 0.32 (older versions used -1)
            min_p=sampling.min_p,
            repetition_penalty=sampling.repetition_penalty,
            stop_token_ids=list(limits.stop_token_ids),
            ignore_eos=True,  # stop only at the request's stop ids, as every engine here does
            skip_special_tokens=False,
            include_stop_str_in_output=True,
            return_token_ids=True,
            return_tokens_as_token_ids=True,
        )
    return body


def finish_reason_of(raw: object) -> Literal["stop", "length"]:
    """Map the server's finish_reason; anything but 'stop' or 'length' is an EngineError."""
    if raw in ("stop", "length"):
        return raw  # type: ignore[return-value]
    raise EngineError(f"the server ended the completion with finish_reason={raw!r} (neither 'stop' nor 'length'): aborted or filtered")


@dataclass(frozen=True)
class ParsedCompletion:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length"]
    exact_ids: bool


def _ids_from_tokens(tokens: object) -> list[int] | None:
    """Ids from vLLM's ``"token_id:N"`` spelling, or None if any entry is spelled otherwise."""
    if not isinstance(tokens, list):
        return None
    ids = []
    for t in tokens:
        if not (isinstance(t, str) and t.startswith(TOKEN_ID_PREFIX) and t[len(TOKEN_ID_PREFIX):].isdigit()):
            return None
        ids.append(int(t[len(TOKEN_ID_PREFIX):]))
    return ids


def parse_completion(payload: object, *, tokenizer=None, require_logprobs: bool = True) -> ParsedCompletion:
    """Token ids, log-probs and finish reason from a ``/v1/completions`` response body.

    Exact ids come from ``choices[0].token_ids`` or from ``"token_id:N"`` logprob tokens;
    otherwise the text is re-tokenized with ``tokenizer`` (``exact_ids=False``).
    """
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise EngineError(f"the server's answer has no choices: {str(payload)[:300]}")
    choice = choices[0]
    reason = finish_reason_of(choice.get("finish_reason"))
    lp = choice.get("logprobs") if isinstance(choice.get("logprobs"), dict) else {}
    from_tokens = _ids_from_tokens(lp.get("tokens"))
    ids = choice.get("token_ids")
    if ids is not None:
        if not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
            raise EngineError(f"the server's token_ids is not a list of ints: {str(ids)[:200]}")
        if from_tokens is not None and from_tokens != ids:
            raise EngineError("the server's token_ids and its logprobs tokens disagree")
    else:
        ids = from_tokens
    exact = ids is not None
    if ids is None:
        text = choice.get("text")
        if not isinstance(text, str):
            raise EngineError("the server returned neither token ids nor text")
        if tokenizer is None:
            raise EngineError("the server returned text, not token ids (not vLLM?): pass tokenizer= to re-tokenize it, or serve with vLLM")
        ids = list(tokenizer.encode(text, add_special_tokens=False))
    values = lp.get("token_logprobs")
    problem = None
    if not isinstance(values, list):
        problem = "the server sent no log-probs (logprobs.token_logprobs)"
    elif len(values) != len(ids):
        problem = f"the server sent {len(values)} log-probs for {len(ids)} tokens" + ("" if exact else " (after re-tokenizing its text)")
    elif not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        problem = "the server sent a null or non-numeric log-prob"
    if problem is None:
        logprobs = [float(v) for v in values]
    elif require_logprobs:
        raise EngineError(problem + "; training needs one per sampled token (set require_logprobs=False only for evaluation)")
    else:
        logprobs = [math.nan] * len(ids)
    return ParsedCompletion(ids, logprobs, reason, exact)


def normalize_base_url(base_url: str) -> str:
    """``http://host:port`` -> ``http://host:port/v1``; a URL that already has a path is kept as is."""
    url = base_url.rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EngineError(f"base_url {base_url!r} is not an http(s) URL, e.g. http://127.0.0.1:8000/v1")
    return url if parts.path else url + "/v1"
