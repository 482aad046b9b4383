"""Function templates: small correct functions, the lines each bug kind may break, and inputs.

A template's lines use ``{fn}`` for the function's name and one placeholder per variable;
``roles`` says which word pool of :mod:`swerl.curriculum.names` a placeholder draws from
(pools ``hours``, ``minutes``, ... below are local to one template). ``sites`` maps a bug
kind to the line (0 = the ``def`` line) its mutator changes. ``args`` draws one call's
arguments; whether a call tells the buggy and the fixed function apart is found out by
running both, never assumed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from random import Random

from swerl.curriculum.names import POOLS

# Pools only a few templates need; merged with the shared ones in :func:`pool`.
_LOCAL_POOLS: dict[str, tuple[str, ...]] = {
    "hours": ("hours", "hrs", "whole_hours"),
    "minutes": ("minutes", "mins", "extra_minutes"),
    "days": ("days", "whole_days", "span"),
    "weeks": ("weeks", "whole_weeks", "periods"),
    "digits": ("digits", "places", "ndigits", "precision"),
    "percent": ("pct", "percent", "tax", "share"),
    "low": ("low", "lo", "floor", "minimum", "start"),
    "high": ("high", "hi", "ceiling", "maximum", "stop"),
    "default": ("default", "fallback", "otherwise"),
}


def pool(name: str) -> tuple[str, ...]:
    """The word pool called ``name``."""
    return POOLS.get(name) or _LOCAL_POOLS[name]


@dataclass(frozen=True)
class Template:
    """One correct function body with its bug sites and an input generator."""

    key: str
    lines: tuple[str, ...]
    roles: Mapping[str, str]
    names: tuple[str, ...]  # function-name patterns; {noun} draws from names.NOUNS
    sites: Mapping[str, int]
    args: Callable[[Random], tuple]
    spare: str | None = None  # the placeholder `wrong_variable` returns instead
    kinds: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", tuple(sorted(self.sites)))


# ---------------------------------------------------------------------------- inputs


def _ints(r: Random, n: int, low: int = 1, high: int = 9) -> list[int]:
    return [r.randint(low, high) for _ in range(n)]


def _distinct_ends(r: Random) -> list[int]:
    # distinct values, so the first and the last element always differ
    return r.sample(range(1, 30), r.randint(2, 4))


def _with_boundary(r: Random) -> tuple:
    limit = r.randint(3, 8)
    values = [limit, *(r.randint(1, 12) for _ in range(r.randint(2, 3)))]
    r.shuffle(values)
    return values, limit


_WORDS = ("apple", "pear", "plum", "fig", "kiwi", "lime", "grape", "melon", "berry", "date")
_CAPS = ("Big Box", "Red Door", "Blue Sky", "Old Town", "New Moon", "Tall Tree")


def _padded(r: Random) -> str:
    return " " * r.randint(1, 3) + r.choice(_WORDS) + " " * r.randint(0, 2)


def _tie_words(r: Random) -> tuple:
    first, second = r.sample([w for w in _WORDS if len(w) == 4], 2)
    return ([r.choice(("fig", "ox")), first, second, "ab"],)


def _dotted(r: Random) -> tuple:
    return (".".join(r.sample(_WORDS, r.randint(2, 3))),)


def _maybe_empty(r: Random) -> tuple:
    return ([],) if r.random() < 0.5 else (_distinct_ends(r),)


# ---------------------------------------------------------------------------- templates

TEMPLATES: tuple[Template, ...] = (
    Template(
        "scaled_sum",
        ("def {fn}({xs}, {k}):", "    {acc} = sum({xs})", "    return {acc} * {k}"),
        {"xs": "numbers", "k": "number", "acc": "result"},
        ("scaled_{noun}", "weighted_{noun}", "total_{noun}"),
        {"arithmetic_operator": 2},
        lambda r: (_ints(r, 3), r.randint(2, 5)),
    ),
    Template(
        "net_total",
        ("def {fn}({xs}, {fee}):", "    {acc} = sum({xs})", "    {net} = {acc} - {fee}", "    return {net}"),
        {"xs": "numbers", "fee": "number", "acc": "result", "net": "result"},
        ("net_{noun}", "remaining_{noun}", "{noun}_left"),
        {"arithmetic_operator": 2, "wrong_variable": 3},
        lambda r: (_ints(r, 3, 5, 20), r.randint(1, 5)),
        spare="acc",
    ),
    Template(
        "count_above",
        ("def {fn}({xs}, {limit}):", "    {count} = 0", "    for {x} in {xs}:", "        if {x} > {limit}:",
         "            {count} += 1", "    return {count}"),
        {"xs": "numbers", "limit": "number", "count": "result", "x": "element"},
        ("count_high_{noun}", "{noun}_over", "num_{noun}_above"),
        {"comparison_boundary": 3},
        _with_boundary,
    ),
    Template(
        "at_least",
        ("def {fn}({v}, {limit}):", "    return {v} >= {limit}"),
        {"v": "number", "limit": "number"},
        ("{noun}_reaches", "enough_{noun}", "{noun}_meets_target"),
        {"comparison_boundary": 1},
        lambda r: (lambda n: (n, n) if r.random() < 0.7 else (n + r.randint(-3, 3), n))(r.randint(2, 50)),
    ),
    Template(
        "first_or_none",
        ("def {fn}({xs}):", "    if not {xs}:", "        return None", "    return {xs}[0]"),
        {"xs": "numbers"},
        ("first_{noun}", "earliest_{noun}", "oldest_{noun}"),
        {"inverted_condition": 1, "wrong_index": 3},
        lambda r: (_distinct_ends(r),),
    ),
    Template(
        "last_or_default",
        ("def {fn}({xs}, {default}=0):", "    if {xs}:", "        return {xs}[-1]", "    return {default}"),
        {"xs": "numbers", "default": "default"},
        ("latest_{noun}", "last_{noun}", "newest_{noun}"),
        {"inverted_condition": 1, "wrong_index": 2, "default_argument": 0},
        _maybe_empty,
    ),
    Template(
        "to_cents",
        ("def {fn}({amount}):", "    return round({amount} * 100)"),
        {"amount": "number"},
        ("{noun}_in_cents", "cents_for_{noun}", "{noun}_cents"),
        {"wrong_constant": 1, "arithmetic_operator": 1},
        lambda r: (r.randint(101, 999) / 4,),
    ),
    Template(
        "total_minutes",
        ("def {fn}({hours}, {minutes}):", "    return {hours} * 60 + {minutes}"),
        {"hours": "hours", "minutes": "minutes"},
        ("{noun}_minutes", "minutes_for_{noun}", "{noun}_duration"),
        {"wrong_constant": 1, "arithmetic_operator": 1},
        lambda r: (r.randint(1, 9), r.randint(1, 59)),
    ),
    Template(
        "total_days",
        ("def {fn}({weeks}, {days}):", "    return {weeks} * 7 + {days}"),
        {"weeks": "weeks", "days": "days"},
        ("{noun}_days", "days_for_{noun}", "{noun}_span"),
        {"wrong_constant": 1, "arithmetic_operator": 1},
        lambda r: (r.randint(1, 9), r.randint(1, 6)),
    ),
    Template(
        "total_hours",
        ("def {fn}({days}, {hours}=0):", "    return {days} * 24 + {hours}"),
        {"days": "days", "hours": "hours"},
        ("{noun}_hours", "hours_for_{noun}", "{noun}_uptime"),
        {"wrong_constant": 1, "default_argument": 0, "arithmetic_operator": 1},
        lambda r: (r.randint(1, 9),) if r.random() < 0.6 else (r.randint(1, 9), r.randint(1, 23)),
    ),
    Template(
        "clean_upper",
        ("def {fn}({s}):", "    return {s}.strip().upper()"),
        {"s": "text"},
        ("clean_{noun}", "{noun}_code", "normalize_{noun}"),
        {"string_method": 1},
        lambda r: (_padded(r),),
    ),
    Template(
        "slug_key",
        ('def {fn}({s}, {sep}="_"):', '    return {s}.lower().replace(" ", {sep})'),
        {"s": "text", "sep": "separator"},
        ("{noun}_key", "{noun}_slug", "slug_for_{noun}"),
        {"string_method": 1, "default_argument": 0},
        lambda r: (r.choice(_CAPS),),
    ),
    Template(
        "join_words",
        ('def {fn}({words}, {sep}=", "):', "    return {sep}.join({words})"),
        {"words": "strings", "sep": "separator"},
        ("join_{noun}s", "{noun}_list", "format_{noun}s"),
        {"default_argument": 0},
        lambda r: (r.sample(_WORDS, r.randint(2, 3)),),
    ),
    Template(
        "round_to",
        ("def {fn}({v}, {digits}=2):", "    return round({v}, {digits})"),
        {"v": "number", "digits": "digits"},
        ("round_{noun}", "{noun}_rounded", "short_{noun}"),
        {"default_argument": 0},
        lambda r: (r.randint(10000, 99999) / 1000 + 0.0001,),
    ),
    Template(
        "average",
        ("def {fn}({xs}):", "    if not {xs}:", "        return 0", "    {acc} = sum({xs})",
         "    return {acc} // len({xs})"),
        {"xs": "numbers", "acc": "result"},
        ("average_{noun}", "mean_{noun}", "{noun}_average"),
        {"inverted_condition": 1, "arithmetic_operator": 4},
        lambda r: (_ints(r, r.randint(2, 4), 2, 20),),
    ),
    Template(
        "in_range",
        ("def {fn}({v}, {low}, {high}):", "    return {low} <= {v} <= {high}"),
        {"v": "number", "low": "low", "high": "high"},
        ("{noun}_in_range", "valid_{noun}", "{noun}_allowed"),
        {"comparison_boundary": 1},
        lambda r: (lambda lo: (lo, lo, lo + r.randint(1, 9)))(r.randint(0, 20)),
    ),
    Template(
        "with_tax",
        ("def {fn}({price}, {pct}=20):", "    {extra} = {price} * {pct} // 100", "    return {price} + {extra}"),
        {"price": "number", "pct": "percent", "extra": "result"},
        ("{noun}_with_tax", "gross_{noun}", "{noun}_total"),
        {"default_argument": 0, "wrong_constant": 1, "arithmetic_operator": 2},
        lambda r: (r.randint(2, 9) * 100,),
    ),
    Template(
        "top_value",
        ("def {fn}({xs}):", "    {ranked} = sorted({xs})", "    return {ranked}[-1]"),
        {"xs": "numbers", "ranked": "result"},
        ("max_{noun}", "top_{noun}", "highest_{noun}"),
        {"wrong_index": 2},
        lambda r: (_distinct_ends(r),),
    ),
    Template(
        "keep_below",
        ("def {fn}({xs}, {limit}):", "    {kept} = [{x} for {x} in {xs} if {x} < {limit}]", "    return {kept}"),
        {"xs": "numbers", "limit": "number", "kept": "result", "x": "element"},
        ("{noun}s_below", "small_{noun}s", "cheap_{noun}s"),
        {"comparison_boundary": 1, "inverted_condition": 1, "wrong_variable": 2},
        _with_boundary,
        spare="xs",
    ),
    Template(
        "clean_lines",
        ("def {fn}({lines}):", "    {kept} = []", "    for {line} in {lines}:", "        if not {line}.strip():",
         "            continue", "        {kept}.append({line}.strip())", "    return {kept}"),
        {"lines": "strings", "kept": "result", "line": "text"},
        ("clean_{noun}s", "{noun}_lines", "nonblank_{noun}s"),
        {"inverted_condition": 3, "string_method": 5, "wrong_variable": 6},
        lambda r: ([_padded(r), " ", r.choice(_WORDS) + " "],),
        spare="lines",
    ),
    Template(
        "initial",
        ("def {fn}({s}):", "    return {s}[0].upper()"),
        {"s": "text"},
        ("{noun}_initial", "initial_of_{noun}", "{noun}_letter"),
        {"wrong_index": 1, "string_method": 1},
        lambda r: (r.choice(_WORDS),),
    ),
    Template(
        "extension",
        ('def {fn}({s}, {sep}="."):', "    return {s}.split({sep})[-1]"),
        {"s": "text", "sep": "separator"},
        ("{noun}_suffix", "{noun}_extension", "last_part_of_{noun}"),
        {"wrong_index": 1, "default_argument": 0},
        _dotted,
    ),
    Template(
        "longest",
        ("def {fn}({words}):", '    {best} = ""', "    for {w} in {words}:", "        if len({w}) > len({best}):",
         "            {best} = {w}", "    return {best}"),
        {"words": "strings", "best": "result", "w": "element"},
        ("longest_{noun}", "{noun}_longest", "widest_{noun}"),
        {"comparison_boundary": 3, "wrong_variable": 5},
        _tie_words,
        spare="w",
    ),
    Template(
        "discount",
        ("def {fn}({price}, {pct}):", "    return {price} - {price} * {pct} // 100"),
        {"price": "number", "pct": "percent"},
        ("discounted_{noun}", "{noun}_after_discount", "sale_{noun}"),
        {"arithmetic_operator": 1, "wrong_constant": 1},
        lambda r: (r.randint(2, 9) * 100, r.randint(1, 9) * 5),
    ),
)

BY_KEY: dict[str, Template] = {t.key: t for t in TEMPLATES}


def templates_for(kind: str) -> list[Template]:
    """The templates that have a site for ``kind``, in declaration order."""
    return [t for t in TEMPLATES if kind in t.sites]
