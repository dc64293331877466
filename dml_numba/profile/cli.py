"""``dml-numba profile``'s command line (the options are declared in ``dml_numba.__main__``)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import dml_numba as dml

from . import OPS, Settings, _simulated, checks, compare, run
from .report import (
    as_dict,
    not_run,
    plot,
    read_json,
    table,
    to_csv,
    to_markdown,
    write_json,
)

#: processes the samples are taken in, by --quick
DEFAULT_PROCESSES = {True: 3, False: 5}


def unwritable(path) -> str | None:
    """Why ``path`` cannot be written (None: it can): checked before any profiling, so that
    minutes of measurements never end in a traceback."""
    p = Path(path)
    parent = p.parent
    if p.is_dir():
        return f"{path} is a folder"
    if not parent.is_dir():
        return f"its folder {parent} does not exist"
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return f"{path} cannot be written (permissions)"
    return None


def _refusal(args) -> str | None:
    for flag in ("json", "csv", "markdown", "plot"):
        path = getattr(args, flag, None)
        why = unwritable(path) if path and not args.worker else None
        if why:
            return f"--{flag} {path}: {why}"
    if args.ops:  # the operators' other names (slice for slice1)
        args.ops = [dml.functional.OTHER_NAMES[o].__name__ if o in dml.functional.OTHER_NAMES
                    else o for o in args.ops]
    bad = [o for o in (args.ops or []) if o not in OPS]
    if bad:
        return f"unknown --ops {bad}; expected some of {', '.join(OPS)}"
    try:
        dml.DataType.from_numpy(args.dtype)
    except (TypeError, dml.ValidationError) as exc:
        return f"--dtype {args.dtype!r} is invalid: {exc}"
    if args.min_time is not None and not args.min_time > 0:
        return f"--min-time {args.min_time} must be a positive number of seconds"
    if args.repeat is not None and args.repeat < 3:
        return f"--repeat {args.repeat} must be at least 3 (a spread needs samples)"
    if args.processes is not None and args.processes < 1:
        return f"--processes {args.processes} must be at least 1"
    if len(args.compare or []) > 2:
        return f"--compare takes BASE.json and at most one NEW.json, got {len(args.compare)}"
    if args.devices:
        status = dml.device_status()
        usable = [name for name, st in status.items() if st == "available" and not (
            name == "cuda" and _simulated())]
        for d in args.devices:
            if status.get(d) != "available":
                why = status.get(d, "unknown device")
                if d == "cuda":  # the simulator the general hint offers is refused here
                    why = why.split("; set NUMBA_ENABLE_CUDASIM")[0] + " (profiling CUDA " \
                        "needs a GPU: Numba's simulator would time Python threads)"
                return (f"device {d!r} is not usable here: {why}; expected some of "
                        f"{', '.join(usable)}")
        if "cuda" in args.devices and _simulated():
            return ("device 'cuda' is Numba's simulator here (NUMBA_ENABLE_CUDASIM=1): it "
                    "would time Python threads; profile CUDA on a GPU")
    return None


def _compare(base_path, new: dict, threshold: float, fail_when_busy: bool = False,
             new_name: str = "the new profile") -> int:
    try:
        base = read_json(base_path)
    except (OSError, ValueError) as exc:
        print(f"profile: --compare: {exc}", file=sys.stderr)
        return 2
    changes = compare.compare(base, new)
    if not changes:
        print(f"profile: --compare: no row of {base_path} matches the new profile",
              file=sys.stderr)
        return 2
    print(compare.table(changes))
    print(compare.summary(changes))
    only_base, only_new = compare.unmatched(base, new)
    for where, keys in ((base_path, only_base), (new_name, only_new)):
        if keys:
            print(f"{len(keys)} {'row' if len(keys) == 1 else 'rows'} only in {where}: " +
                  ", ".join(f"'{w}' on {i}" for w, i, _ in keys[:6]) +
                  (f" and {len(keys) - 6} more" if len(keys) > 6 else ""))
    busy = {name: compare.busy(p) for name, p in ((base_path, base), (new_name, new))}
    for name, why in busy.items():
        if why:
            print(f"note: {name} was measured on a busy machine: {why[0]}")
    worse = compare.regressions(changes, threshold)
    if worse:
        untrusted = any(busy.values())
        print(f"{len(worse)} {'row' if len(worse) == 1 else 'rows'} slower by more than "
              f"{threshold:.0%} beyond the spread" +
              ("; a verdict between runs on a busy machine cannot be trusted: rerun both on a "
               "quiet machine" + ("" if fail_when_busy else " (not failing: --fail-when-busy "
                                                             "fails on it)")
               if untrusted else ""))
        return 1 if fail_when_busy or not untrusted else 0
    return 0


def main(args) -> int:
    refusal = _refusal(args)
    if refusal:
        print(f"profile: {refusal}", file=sys.stderr)
        return 2
    pair = list(args.compare or [])
    threshold = args.threshold
    if len(pair) == 2:  # two files: no profiling
        try:
            new = read_json(pair[1])
        except (OSError, ValueError) as exc:
            print(f"profile: --compare: {exc}", file=sys.stderr)
            return 2
        return _compare(pair[0], new, threshold, args.fail_when_busy, pair[1])
    settings = Settings.default(args.quick, args.min_time, args.repeat)
    processes = args.processes or (1 if args.worker else DEFAULT_PROCESSES[args.quick])
    if processes > 1:
        from .processes import pool, run_workers

        try:
            rows, meta = pool(run_workers(args, processes, settings.repeat))
        except RuntimeError as exc:
            print(f"profile: {exc}", file=sys.stderr)
            return 1
    else:
        meta = {}
        rows = run(args.ops, args.devices, args.dtype, args.quick, peers=not args.no_peers,
                   settings=settings, meta=meta)
        meta["settings"]["processes"] = 1
    if args.worker:  # one of several processes: the parent reports
        write_json(rows, args.json, meta)
        return 0
    warnings = checks.warnings(meta, rows)
    print(table(rows, warnings))
    if not_run(meta):
        print(f"not run: {not_run(meta)}")
    failed = 0
    for flag, path, write in (
            ("json", args.json, lambda p: write_json(rows, p, meta, warnings)),
            ("csv", args.csv, lambda p: Path(p).write_text(to_csv(rows))),
            ("markdown", args.markdown,
             lambda p: Path(p).write_text(to_markdown(rows, meta, warnings))),
            ("plot", args.plot, lambda p: plot(rows, p, meta, warnings))):
        if not path:
            continue
        try:  # every output that can be written is, whatever happened to the others
            write(path)
        except OSError as exc:
            failed += 1
            print(f"profile: --{flag} {path}: not written ({exc.strerror or exc})",
                  file=sys.stderr)
            continue
        print(f"wrote {path}")
    if failed:
        return 1
    if pair:
        return _compare(pair[0], as_dict(rows, meta, warnings), threshold, args.fail_when_busy)
    return 0
