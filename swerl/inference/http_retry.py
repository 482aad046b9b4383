"""One HTTP call to an inference server, retried: which failures deserve another try, how long
to wait between tries, and the EngineError once they run out.

A connection that fails, or a 408/429/5xx answer, means the server is overloaded or
restarting, not refusing the request: worth another try after a doubling back-off. A read
timeout is not: the server was slow, and sending a generation again would only double its
load. Any other answer is returned as it is, for the caller to judge.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from swerl.inference.base import EngineError

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
RETRY_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.PoolTimeout)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently one call is tried."""

    max_retries: int = 3  # extra attempts after the first
    backoff_initial_s: float = 0.5  # wait before the first retry; doubled at each further one
    backoff_max_s: float = 8.0  # cap on the wait between two retries
    statuses: frozenset[int] = RETRY_STATUSES  # answers worth another try

    def delays(self) -> Iterator[float]:
        """The wait before each attempt: none before the first."""
        yield 0.0
        for retry in range(self.max_retries):
            yield min(self.backoff_max_s, self.backoff_initial_s * 2**retry)


def error_text(response: httpx.Response) -> str:
    """The server's error message: ``error.message`` of a JSON body, else the start of the text."""
    try:
        body = response.json()
        msg = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(msg, dict):
            msg = msg.get("message", msg)
        return str(msg)[:500]
    except (json.JSONDecodeError, ValueError):
        return response.text[:500]


class _Attempts:
    """What the blocking and the async loop share: judging each outcome, and the final error."""

    def __init__(self, policy: RetryPolicy, method: str, url: str) -> None:
        self.policy, self.method, self.url = policy, method, url
        self.last = ""

    def again(self, outcome: httpx.Response | httpx.HTTPError) -> bool:
        """True when ``outcome`` deserves another try; EngineError for a transport failure that does not."""
        if isinstance(outcome, RETRY_ERRORS):
            self.last = f"{type(outcome).__name__}: {outcome}"
            return True
        if isinstance(outcome, httpx.TimeoutException):
            raise EngineError(f"{self.method} {self.url}: no answer in time ({type(outcome).__name__}); a slow generation is not retried") from outcome
        if isinstance(outcome, httpx.HTTPError):
            raise EngineError(f"{self.method} {self.url}: {type(outcome).__name__}: {outcome}") from outcome
        if outcome.status_code in self.policy.statuses:
            self.last = f"HTTP {outcome.status_code}: {error_text(outcome)}"
            return True
        return False

    def exhausted(self) -> EngineError:
        return EngineError(f"{self.method} {self.url} failed {self.policy.max_retries + 1} times; last: {self.last}")


def send(client: httpx.Client, method: str, url: str, policy: RetryPolicy, **kwargs) -> httpx.Response:
    """``client.request(method, url, **kwargs)`` under ``policy``; the first answer not worth a retry."""
    attempts = _Attempts(policy, method, url)
    for delay in policy.delays():
        time.sleep(delay)
        outcome = _outcome(client.request, method, url, **kwargs)
        if not attempts.again(outcome):
            return outcome  # type: ignore[return-value]
    raise attempts.exhausted()


async def send_async(client: httpx.AsyncClient, method: str, url: str, policy: RetryPolicy, **kwargs) -> httpx.Response:
    """``send`` for an async client: the event loop keeps running during the back-off."""
    attempts = _Attempts(policy, method, url)
    for delay in policy.delays():
        await asyncio.sleep(delay)
        try:
            outcome: httpx.Response | httpx.HTTPError = await client.request(method, url, **kwargs)
        except httpx.HTTPError as e:
            outcome = e
        if not attempts.again(outcome):
            return outcome  # type: ignore[return-value]
    raise attempts.exhausted()


def _outcome(call, *args, **kwargs) -> httpx.Response | httpx.HTTPError:
    try:
        return call(*args, **kwargs)
    except httpx.HTTPError as e:
        return e
