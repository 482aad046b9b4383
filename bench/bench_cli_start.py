"""How long the `swerl` command takes to answer, per command, against `python -c pass` measured in the same run.

    .venv/bin/python bench/bench_cli_start.py [--reps 5]

Each figure is the median wall time of ``--reps`` fresh processes (``--help`` of each command: the
import cost every invocation pays before it does anything).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = [[], ["grade"], ["rollout"], ["eval"], ["train", "dapo"], ["pipeline", "start"], ["follow"], ["up"],
            ["tasks", "validate"], ["images", "build"], ["model", "init-tiny"]]


def median_s(argv: list[str], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    base = median_s([sys.executable, "-c", "pass"], args.reps)
    print(f"{'command':<28} {'median s':>9} {'vs python -c pass':>18}")
    print(f"{'python -c pass':<28} {base:>9.3f} {1.0:>17.1f}x")
    for cmd in COMMANDS:
        took = median_s([sys.executable, "-m", "swerl.cli", *cmd, "--help"], args.reps)
        print(f"{'swerl ' + ' '.join(cmd) + ' --help':<28} {took:>9.3f} {took / base:>17.1f}x")


if __name__ == "__main__":
    main()
