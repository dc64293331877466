"""Run every CPU benchmark suite; ``--write`` adds the run (its date, machine and command) at
the top of benchmarks/HISTORY.md, the logbook. benchmarks/RESULTS.md, the current figures of
each area, is edited by hand from the runs it quotes.

    python3 -m benchmarks.run_all [--quick] [--write] [--only bench_dispatch ...]
"""
from __future__ import annotations

import argparse
import datetime
import importlib
from pathlib import Path

from benchmarks._harness import machine

SUITES = ["bench_data_movement", "bench_lp_pooling", "bench_dispatch", "bench_convolution",
          "bench_threading", "bench_latency", "bench_memory", "bench_dask", "bench_graph"]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--write", action="store_true", help="add the run to benchmarks/HISTORY.md")
    ap.add_argument("--only", nargs="*", default=SUITES)
    args = ap.parse_args(argv)
    parts = []
    for name in args.only:
        print(f"== {name}", flush=True)
        mod = importlib.import_module(f"benchmarks.{name}")
        parts.append(mod.run(quick=args.quick).markdown())
    if args.write:
        path = Path(__file__).with_name("HISTORY.md")
        head, _, rest = path.read_text().partition("\n## ")
        cmd = "python3 -m benchmarks.run_all --write" + (" --quick" if args.quick else "") + (
            f" --only {' '.join(args.only)}" if args.only != SUITES else "")
        run = (f"## A run of the suites ({datetime.date.today()})\n\nMachine: {machine()}. "
               f"Command: `{cmd}`. Every ratio compares timings taken in the same run (medians); "
               "the machine may be shared and noisy, so read ratios, not single times.\n\n")
        path.write_text(head.rstrip("\n") + "\n\n" + run + "\n".join(parts) + "\n\n## " + rest)


if __name__ == "__main__":
    main()
