"""A progress bar for long work; quiet when stderr is not a terminal but still prints a line per step."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


@contextmanager
def bar(description: str, total: int) -> Iterator[Callable[[str], None]]:
    """Yield ``advance(label)``; thread-safe (rich's Progress locks internally)."""
    console = Console(stderr=True, soft_wrap=True)
    if not sys.stderr.isatty():
        done = [0]

        def log(label: str) -> None:
            done[0] += 1
            console.print(f"{description}: {done[0]}/{total} {label}")

        yield log
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[label]}"), console=console) as progress:
        tid = progress.add_task(description, total=total, label="")
        yield lambda label: progress.update(tid, advance=1, label=label)
