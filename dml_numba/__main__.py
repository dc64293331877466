"""``dml-numba`` / ``python -m dml_numba``: profile, demo, info, cache management and the
tuner's wisdom."""
from __future__ import annotations

import argparse
import sys


def _demo(args) -> int:
    from ._demo import run_demo

    return run_demo()


def _profile(args) -> int:
    from .profile import main as profile_main

    return profile_main(args)


def _info(args) -> int:
    import platform

    import numpy as np

    import dml_numba as dml

    from . import _housekeeping

    print(f"dml_numba {dml.__version__}  python {platform.python_version()}  "
          f"numpy {np.__version__}")
    try:
        import numba

        print(f"numba {numba.__version__}  llvmlite {__import__('llvmlite').__version__}")
    except ImportError as exc:  # pragma: no cover
        print(f"numba: not importable ({exc})")
    for name, status in dml.device_status().items():
        print(f"device {name:6s} {status}")
    usage = _housekeeping.usage()
    if usage["on"]:
        print(f"disk cache on: {usage['library_dir']}: {usage['modules']} modules, "
              f"{usage['bytes'] / 1e6:.1f} MB")
    else:
        print(f"disk cache off: {usage['reason']}")
    stats = dml.cache.stats()
    print(f"memory cache (this process): {stats}")
    print(f"compiled kernels held by this process: {stats['kept']} (machine code is never "
          "freed: about 0.1 MiB a kernel loaded from the disk cache, 1.2 MiB compiled; evicted "
          "kernels are reused, not loaded again)")
    from ._threads import describe

    print(describe())
    from llvmlite import binding as ll

    from . import _blas
    from ._host import vector_lanes

    print(_blas.describe(vector_lanes(), ll.get_host_cpu_name()))
    _print_wisdom()
    if getattr(args, "cuda_kernels", False):
        _cuda_kernels()
    return 0


def _print_wisdom() -> None:
    """This machine's tuned keys (the choice, the mode and the seconds tuning took), and the
    keys whose tunings were not kept, with why."""
    from . import _wisdom
    from ._registry import load_backend

    load_backend("cpu")  # its tuner registers what a well-formed choice is

    found = _wisdom.entries()
    chosen = {k: e for k, e in found.items() if _wisdom.is_choice(e)}
    busy = {k: e for k, e in found.items() if _wisdom.is_busy_record(e)}
    total = sum(e.get("tuning_s", 0) for e in chosen.values())
    print(f"tuned kernels (wisdom of this machine): {len(chosen)} keys, {total:.2f} s of tuning"
          + (f"; {len(busy)} not kept (the machine was busy)" if busy else ""))
    if not found:
        print("  (builds use the static rule; DML_NUMBA_TUNE=quick measures each new shape "
              "once and keeps the fastest kernel here)")
    for entry in sorted(chosen.values(), key=lambda e: e.get("label", "")):
        left = entry.get("left") or []
        state = (f"; provisional, {len(left)} candidates left for a later process" if left
                 else "; provisional, re-timed by the next process"
                 if entry.get("provisional") else "")
        print(f"  {entry.get('label', '?')}: {entry.get('chosen', entry['choice'])} "
              f"({entry.get('mode', '?')}, {entry.get('tuning_s', 0):.2f} s; static rule: "
              f"{entry.get('static', '?')}{state})")
    for entry in sorted(busy.values(), key=lambda e: e.get("label", "")):
        b = entry["busy"]
        print(f"  {entry.get('label', '?')}: not kept: other programs used "
              f"{b['others']:.0%} of the CPU while it was timed ({b['attempts']} attempt"
              f"{'s' if b['attempts'] != 1 else ''}; a tuning is kept below "
              f"{b.get('limit', 0.3):.0%}); the static rule's {entry.get('static', '?')} runs")


def _tune(args) -> int:
    from . import _wisdom
    from ._registry import load_backend

    load_backend("cpu")  # its tuner registers what a well-formed choice is

    if args.export_file:
        try:
            n = _wisdom.export(args.export_file)
        except _wisdom.WisdomError as exc:
            print(f"nothing exported: {exc}", file=sys.stderr)
            return 1
        print(f"exported {n} tuned keys to {args.export_file}")
    elif args.import_file:
        try:
            n, skipped = _wisdom.import_(args.import_file)
        except _wisdom.WisdomError as exc:
            print(f"nothing imported: {exc}", file=sys.stderr)
            return 1
        print(f"imported {n} tuned keys from {args.import_file}" +
              (f" ({skipped} malformed entries skipped)" if skipped else ""))
    elif args.forget:
        print(f"forgot {_wisdom.forget()} tuned keys")
    else:
        _print_wisdom()
    return 0


def _cuda_kernels() -> None:
    """Registers, spills, shared memory and occupancy of the profiler's workloads' CUDA kernels
    for sm_80 and sm_90, from NVIDIA's compiler (no GPU needed): every kernel a workload can run
    (convolution's direct and tiled), the one chosen by default marked with *."""
    import numpy as np

    from .cuda import kernel_for, kernel_variants, resource_usage
    from .workloads import suite

    print(f"{'workload':40s} {'kernel':24s} {'arch':6s} {'regs':>5s} {'spill B':>8s} "
          f"{'smem B':>7s} {'threads':>7s} {'occupancy':>9s}")
    for w in suite(quick=True):
        desc, _ = w.make(np.dtype(np.float32), np.random.default_rng(0))
        default = kernel_for(desc).key
        variants = {}
        for opts in kernel_variants(desc, folds=False):  # as the operator runs alone
            variants.setdefault(kernel_for(desc, **opts).key, opts)
        for key, opts in variants.items():
            name = key.op + (" *" if key == default else "")
            for cc in ((8, 0), (9, 0)):
                for r in resource_usage(desc, cc, **opts):
                    print(f"{w.name[:40]:40s} {name[:24]:24s} {r['cc']:6s} {r['registers']:5d} "
                          f"{r['spill_bytes']:8d} {r['shared_bytes']:7d} "
                          f"{r['threads_per_block']:7d} {r['occupancy']:9.0%}")


def _cache(args) -> int:
    from . import _diskcache, _housekeeping

    if args.action == "clear":
        done = _housekeeping.clear()
    else:
        done = _housekeeping.prune(args.max_bytes)
    if done["reason"]:
        print(f"disk cache off, nothing deleted: {done['reason']}")
        return 1
    print(f"deleted {done['modules']} cached modules ({done['bytes'] / 1e6:.1f} MB) from "
          f"{_diskcache.library_dir()}" + (f"; {done['remaining'] / 1e6:.1f} MB remain"
                                          if "remaining" in done else ""))
    return 0


def _byte_count(text: str) -> int:
    """``12345``, ``500M``, ``2G``, ``1.5GB``: a number of bytes (k/M/G/T are powers of 1024)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)[bB]?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a byte count (e.g. 500M, 2G)")
    scale = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * scale)


def _operator_names() -> list[str]:
    from .functional import __all__ as names

    return list(names)


def main(argv=None) -> int:
    from ._version import __version__

    parser = argparse.ArgumentParser(prog="dml-numba", description=__doc__.replace("``", ""))
    parser.add_argument("--version", action="version", version=f"dml-numba {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("profile", help="time jitted against vectorised code and peers")
    p.add_argument("--ops", nargs="+", metavar="OP",
                   help=f"operators: {' '.join(_operator_names())} (default: all)")
    p.add_argument("--devices", nargs="+", metavar="DEV",
                   help="numpy cpu cuda (default: every usable one; cuda only on a real GPU)")
    p.add_argument("--dtype", default="float32", help="numpy dtype name (default float32)")
    p.add_argument("--quick", action="store_true", help="small sizes: the whole suite in < 2 min")
    p.add_argument("--no-peers", action="store_true", help="skip NumPy/PyTorch/ONNX Runtime")
    p.add_argument("--json", metavar="FILE", help="write every row as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="write a chart of the speed-ups")
    p.add_argument("--csv", metavar="FILE", help="write every row as CSV (times in seconds)")
    p.add_argument("--markdown", metavar="FILE",
                   help="write the table as Markdown (for an issue or RESULTS.md)")
    from .profile import Settings  # the defaults, said where they are used

    quick, full = Settings.default(True), Settings.default(False)
    p.add_argument("--min-time", type=float, metavar="S",
                   help="seconds a sample lasts at least, calls repeated to fill it "
                        f"(default {quick.min_time:g} with --quick, else {full.min_time:g})")
    p.add_argument("--repeat", type=int, metavar="N",
                   help=f"samples a row (default {quick.repeat} with --quick, else "
                        f"{full.repeat}; at least 3)")
    p.add_argument("--processes", type=int, metavar="N",
                   help="take the samples in N processes one after the other and pool them, "
                        "so that the spread holds what differs between processes (default 3 "
                        "with --quick, else 5; 1: this process only)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--compare", nargs="+", metavar="JSON",
                   help="BASE.json: profile now and compare with it; BASE.json NEW.json: "
                        "compare two saved profiles. Exit status 1 when a row is slower "
                        "beyond the spread of both runs by more than --threshold")
    p.add_argument("--threshold", type=float, default=0.05, metavar="F",
                   help="the slow-down --compare fails on (default 0.05: 5%%)")
    p.add_argument("--fail-when-busy", action="store_true",
                   help="--compare: exit 1 on a slow-down even when either run was busy (by "
                        "default such a verdict is reported as untrustworthy and exit is 0)")
    p.set_defaults(fn=_profile)
    sub.add_parser("demo", help="run every operator on every available device").set_defaults(
        fn=_demo)
    i = sub.add_parser("info", help="versions, devices, cache folder and counters")
    i.add_argument("--cuda-kernels", action="store_true",
                   help="also compile the profiler's CUDA kernels with NVIDIA's compiler and "
                        "print registers, spills, shared memory and occupancy (no GPU needed)")
    i.set_defaults(fn=_info)
    c = sub.add_parser("cache", help="manage the disk cache of generated kernels")
    c.add_argument("action", choices=["clear", "prune"], nargs="?",
                   help="clear: delete every cached kernel; prune: delete the least recently used "
                        "until the folder holds at most --max-bytes")
    c.add_argument("--max-bytes", type=_byte_count, default=None, metavar="N",
                   help="for prune: the size to keep (bytes, or with k/M/G)")
    c.set_defaults(fn=_cache)
    t = sub.add_parser("tune", help="the tuner's wisdom: list, export, import or forget it")
    what = t.add_mutually_exclusive_group()
    what.add_argument("--export", dest="export_file", metavar="FILE",
                      help="write this machine's tuned choices to FILE")
    what.add_argument("--import", dest="import_file", metavar="FILE",
                      help="merge FILE's tuned choices (exported on an identical machine)")
    what.add_argument("--forget", action="store_true",
                      help="delete this machine's tuned choices (tuned again on first use)")
    t.set_defaults(fn=_tune)
    args = parser.parse_args(argv)
    if args.command == "cache" and args.action is None:  # what it can do, not an error
        c.print_help()
        return 0
    if getattr(args, "action", None) == "prune" and args.max_bytes is None:
        parser.error("cache prune needs --max-bytes N")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
