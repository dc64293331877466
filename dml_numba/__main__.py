"""``dml-numba`` / ``python -m dml_numba``: profile, demo, info and cache management."""
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

    from . import _diskcache

    print(f"dml_numba {dml.__version__}  python {platform.python_version()}  numpy {np.__version__}")
    try:
        import numba

        print(f"numba {numba.__version__}  llvmlite {__import__('llvmlite').__version__}")
    except ImportError as exc:  # pragma: no cover
        print(f"numba: not importable ({exc})")
    for name, status in dml.device_status().items():
        print(f"device {name:6s} {status}")
    usage = _diskcache.usage()
    print(f"disk cache {usage['dir']} ({'on' if _diskcache.enabled() else 'off'}): "
          f"{usage['modules']} modules, {usage['bytes'] / 1e6:.1f} MB")
    print(f"memory cache (this process): {dml.cache.stats()}")
    return 0


def _cache(args) -> int:
    from . import _diskcache

    if args.action == "clear":
        _diskcache.clear_disk()
        print(f"cleared {_diskcache.cache_dir()}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dml-numba", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("profile", help="time jitted against vectorised code and peers")
    p.add_argument("--ops", nargs="+", metavar="OP",
                   help="operators: padding lp_pooling convolution tile slice1 (default: all)")
    p.add_argument("--devices", nargs="+", metavar="DEV",
                   help="numpy cpu cuda (default: every usable one; cuda only on a real GPU)")
    p.add_argument("--dtype", default="float32", help="numpy dtype name (default float32)")
    p.add_argument("--quick", action="store_true", help="small sizes: the whole suite in < 2 min")
    p.add_argument("--no-peers", action="store_true", help="skip NumPy/PyTorch/ONNX Runtime")
    p.add_argument("--json", metavar="FILE", help="write every row as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="write a chart of the speed-ups")
    p.set_defaults(fn=_profile)
    sub.add_parser("demo", help="run every operator on every available device").set_defaults(fn=_demo)
    sub.add_parser("info", help="versions, devices, cache folder and counters").set_defaults(fn=_info)
    c = sub.add_parser("cache", help="manage the disk cache of generated kernels")
    c.add_argument("action", choices=["clear"])
    c.set_defaults(fn=_cache)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
