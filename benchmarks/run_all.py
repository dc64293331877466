"""Run every benchmark and write benchmarks/RESULTS.md (the machine and command included).

    python3 -m benchmarks.run_all [--quick] [--write]
"""
from __future__ import annotations

import argparse
import datetime
import importlib
from pathlib import Path

from benchmarks._harness import machine

MARKER = "<!-- analysis: kept when the tables above are regenerated -->"
SUITES = ["bench_data_movement", "bench_lp_pooling", "bench_dispatch", "bench_convolution",
          "bench_threading", "bench_latency", "bench_memory", "bench_dask", "bench_graph"]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--write", action="store_true", help="write benchmarks/RESULTS.md")
    ap.add_argument("--only", nargs="*", default=SUITES)
    args = ap.parse_args(argv)
    parts = []
    for name in args.only:
        print(f"== {name}", flush=True)
        mod = importlib.import_module(f"benchmarks.{name}")
        parts.append(mod.run(quick=args.quick).markdown())
    if args.write:
        path = Path(__file__).with_name("RESULTS.md")
        kept = ""
        if path.exists() and MARKER in path.read_text():
            kept = path.read_text().split(MARKER, 1)[1]  # the hand-written analysis survives
        cmd = "python3 -m benchmarks.run_all --write" + (" --quick" if args.quick else "")
        head = (f"# Benchmark results\n\nMeasured {datetime.date.today()} on {machine()}.\n"
                f"Command: `{cmd}`. Every ratio compares timings taken in the same run "
                "(medians); the machine is shared and noisy, so read ratios, not single times.\n\n")
        path.write_text(head + "\n".join(parts) + "\n" + MARKER + kept)


if __name__ == "__main__":
    main()
