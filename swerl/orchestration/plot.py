"""The pipeline's curve: held-out Pass@1 (mean ± SEM over runs) after each stage, as a PNG."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def plot_pass_at_1(rows: Sequence[Mapping[str, Any]], out: Path, title: str = "") -> Path | None:
    """Plot ``pass_at_1`` with ``pass_at_1_sem`` error bars per row (``stage`` on the x axis).

    Rows without a Pass@1 are left out; returns None when none has one.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and workers
    import matplotlib.pyplot as plt

    points = [r for r in rows if r.get("pass_at_1") is not None]
    if not points:
        return None
    x = list(range(len(points)))
    y = [100 * float(r["pass_at_1"]) for r in points]
    err = [100 * float(r.get("pass_at_1_sem") or 0.0) for r in points]
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(points), 3.6), dpi=120)
    ax.errorbar(x, y, yerr=err, marker="o", capsize=4, linewidth=1.5)
    for xi, yi, ei in zip(x, y, err):
        ax.annotate(f"{yi:.1f}±{ei:.1f}", (xi, yi), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8)
    ax.set_xticks(x, [str(r["stage"]) for r in points])
    ax.set_xlim(-0.5, len(points) - 0.5)
    ax.set_ylabel("held-out Pass@1 (%)")
    ax.set_ylim(bottom=0, top=max(10.0, max(a + b for a, b in zip(y, err)) * 1.25))
    ax.grid(axis="y", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
