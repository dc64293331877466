"""``dml-numba`` / ``python -m dml_numba``: demo, info and cache management."""
from __future__ import annotations

import argparse
import sys


def _demo(args) -> int:
    from ._demo import run_demo

    return run_demo()


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
    sub.add_parser("demo", help="run every operator on every available device").set_defaults(fn=_demo)
    sub.add_parser("info", help="versions, devices, cache folder and counters").set_defaults(fn=_info)
    c = sub.add_parser("cache", help="manage the disk cache of generated kernels")
    c.add_argument("action", choices=["clear"])
    c.set_defaults(fn=_cache)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
