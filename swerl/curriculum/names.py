"""Word lists the curriculum draws its names from.

Every list holds distinct lowercase identifiers that are not Python keywords or builtins a
template uses, so any draw renders to valid, readable code. Package names are a prefix
and a suffix glued together (``cedarkit``); there are ``len(PACKAGE_PREFIXES) *
len(PACKAGE_SUFFIXES)`` of them, which bounds how many tasks one curriculum can hold.
"""

from __future__ import annotations

PACKAGE_PREFIXES = (
    "amber", "birch", "cedar", "delta", "ember", "fjord", "gable", "harbor", "iris", "juniper",
    "kestrel", "lumen", "maple", "nimbus", "onyx", "pebble", "quartz", "raven", "sable", "tundra",
    "umber", "violet", "willow", "yarrow", "zephyr", "acorn", "basil", "cobalt", "dune", "falcon",
    "garnet", "hazel", "indigo", "jasper", "kelp", "lotus", "marble", "nectar", "orchid", "pine",
    "quill", "river", "slate", "thistle", "upland", "vale", "wren", "yew", "zinc", "aspen",
)  # fmt: skip

PACKAGE_SUFFIXES = ("kit", "lib", "box", "tools", "utils", "core", "lab", "works", "ops", "calc")

# Module names: the domain a package's helpers belong to (``invoice.py``).
MODULES = (
    "invoice", "billing", "ledger", "pricing", "inventory", "grades", "payroll", "shipping",
    "weather", "scores", "tickets", "recipes", "schedule", "budget", "catalog", "garden",
    "fleet", "clinic", "transit", "census", "orders", "rentals", "library", "stock",
)  # fmt: skip

# The second half of a function name: ``total`` + ``_`` + ``due``.
NOUNS = (
    "price", "score", "order", "fare", "rent", "salary", "parcel", "balance", "reading",
    "sample", "visit", "booking", "badge", "stock", "batch", "grade", "ticket", "budget",
    "due", "fee", "payment", "item", "entry", "record",
)  # fmt: skip

# Variable-name pools, one per role a template parameter or local plays.
POOLS: dict[str, tuple[str, ...]] = {
    # a list of numbers
    "numbers": ("items", "values", "amounts", "prices", "scores", "weights", "counts", "readings",
                "marks", "sizes", "costs", "points"),
    # a list of strings
    "strings": ("words", "names", "labels", "tags", "titles", "lines", "codes", "keys", "parts", "entries"),
    # one number
    "number": ("rate", "factor", "scale", "step", "bonus", "fee", "limit", "offset", "margin", "quota",
               "amount", "value", "price", "level", "cap"),
    # one string
    "text": ("text", "label", "name", "title", "word", "code", "tag", "key", "line", "entry", "path"),
    # a running or final result
    "result": ("total", "result", "acc", "subtotal", "tally", "outcome", "answer", "summary"),
    # a loop variable or a single element
    "element": ("item", "each", "elem", "piece", "unit", "member", "one", "current"),
    # a separator argument
    "separator": ("sep", "joiner", "glue", "delim", "divider"),
}
