"""pytest node ids written the way a task's log parser writes them.

Published FAIL_TO_PASS / PASS_TO_PASS ids are what the publisher's parser printed, quirks
included: swebench's ``parse_log_pytest`` cuts an id at its first space
(``t.py::test_x[a b-1]`` becomes ``t.py::test_x[a``), ``parse_log_pytest_v2`` collapses runs
of spaces, ``parse_log_pytest_options`` shortens path parameters. Rather than re-implement
each quirk, a node id is passed through the task's own parser as the one line that parser
would read for it, so the cross-check with pytest's report uses exactly the publisher's form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from swerl.grading.log_parsers import PASSING

LogParser = Callable[[str], dict[str, str]]


def parser_form(nodeid: str, parser: LogParser) -> str:
    """``nodeid`` as ``parser`` writes it in a status map (the node id itself when the parser reads no id)."""
    parsed = parser(f"PASSED {nodeid}")
    return next(iter(parsed)) if len(parsed) == 1 else nodeid


def group_by_parser_form(outcomes: Mapping[str, str], parser: LogParser) -> dict[str, list[str]]:
    """pytest's ``{node id: status}`` as ``{parser form: [statuses of the nodes written that way]}``.

    Several nodes can share a form (two parametrisations cut at the same space); their
    outcomes are kept side by side, never merged into one.
    """
    groups: dict[str, list[str]] = {}
    for nodeid, status in outcomes.items():
        groups.setdefault(parser_form(nodeid, parser), []).append(str(status))
    return groups


def lookup(test: str, groups: Mapping[str, list[str]]) -> list[str] | None:
    """The outcomes recorded for a listed ``test``, found as swebench finds it in a status map.

    Exact first; an id cut inside its parameters (more ``[`` than ``]``, as hundreds of
    published SWE-bench ids are) matches every form it is a prefix of.
    """
    if test in groups:
        return list(groups[test])
    if test.count("[") > test.count("]"):
        found = [s for form, statuses in groups.items() if form.startswith(test) for s in statuses]
        if found:
            return found
    if " - " in test:
        # parse_log_pytest_v2 keeps the reason of an XFAIL / XPASS line in the id ("t.py::test_x - gh #12"):
        # pytest's own node is the part before it
        return lookup(test.split(" - ", 1)[0], groups)
    return None


def all_passing(statuses: list[str], *, skipped_ok: bool = False) -> bool:
    allowed = PASSING | {"SKIPPED"} if skipped_ok else PASSING
    return bool(statuses) and all(s in allowed for s in statuses)
