"""Test-log parsers, by the names SWE-bench and SWE-rebench use (``install_config.log_parser``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

PASSING = frozenset({"PASSED", "XFAIL"})
FAILING = frozenset({"FAILED", "ERROR"})

LogParser = Callable[[str], dict[str, str]]


class UnknownLogParserError(ValueError):
    """The task names a parser that does not exist."""


@lru_cache(maxsize=1)
def _registry() -> dict[str, Callable]:
    from swebench.harness.log_parsers import PARSER_REGISTRY  # imports modal & co: seconds, so only when needed

    return dict(PARSER_REGISTRY)


def available_parsers() -> list[str]:
    return sorted(_registry())


def get_log_parser(name: str) -> LogParser:
    """The parser called ``name``, as a function of the log alone."""
    fn = _registry().get(name)
    if fn is None:
        close = [p for p in available_parsers() if name.replace("parse_log_", "") in p][:5]
        raise UnknownLogParserError(
            f"unknown log parser {name!r} in install_config.log_parser; "
            f"use one of swebench's parsers, e.g. {', '.join(close or ['parse_log_pytest', 'parse_log_pytest_v2', 'parse_log_django'])}"
        )

    def parse(log: str) -> dict[str, str]:
        return {k: str(v).upper() for k, v in fn(log, None).items()}

    return parse
