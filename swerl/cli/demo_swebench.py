"""`swerl demo swebench`: the demo tasks as SWE-bench 5 records, with images in SWE-bench's layout."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from swerl.cli.common import docker_ready, fail, console


def demo_swebench(
    out: Path = typer.Option(Path(".swerl/demo-swebench"), "--out", help="Folder for swebench.jsonl, repos/ and tasks.jsonl."),
    eval_type: str = typer.Option("pass_and_fail", "--eval-type", help="'pass_and_fail', or 'fail_only' (a listed test "
                                  "absent from the log passes)."),
    log_parser: str = typer.Option("parse_log_pytest", "--log-parser", help="Parser name in swebench's PARSER_REGISTRY."),
    slug: Optional[list[str]] = typer.Option(None, "--task", help="Only this demo task (slug, e.g. ledger); repeat for more."),
    ca_cert: Optional[list[Path]] = typer.Option(None, "--ca-cert", help="Extra CA certificate (PEM) for builds; repeat "
                                                 "for more. Default: the host's bundle."),
    concurrency: int = typer.Option(2, "--concurrency", "-j", min=1, max=64, help="Builds at once."),
    log_dir: Optional[Path] = typer.Option(None, "--log-dir", help="Build logs (default: <out>/build-logs)."),
    force: bool = typer.Option(False, "--force", help="Rebuild the images even when their tags exist."),
) -> None:
    """Write the demo tasks as SWE-bench 5 records (image, eval_script, log_parser, eval_type; no install_config)."""
    from swerl.demo.swebench_format import materialize_swebench_demo
    from swerl.demo.swebench_records import EVAL_TYPES

    if eval_type not in EVAL_TYPES:
        fail(f"--eval-type must be one of {', '.join(EVAL_TYPES)}, got {eval_type!r}")
    if out.exists() and not out.is_dir():
        fail(f"--out {out} is a file, not a folder; choose a folder")
    docker_ready()
    try:
        path = materialize_swebench_demo(out, eval_type=eval_type, log_parser=log_parser, slugs=slug, log_dir=log_dir,
                                         ca_certs=ca_cert, builds=concurrency, force=force)
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        fail(str(e), code=1)
    rows = sum(1 for line in path.read_text().splitlines() if line.strip())
    console.print(f"{rows} SWE-bench 5 record(s): --tasks {path}")
