"""Work-arounds for third-party import quirks.

numba-cuda (0.30) installs a meta-path finder at startup that redirects any module whose name
*contains* "numba.cuda" -- which includes ``dml_numba.cuda`` -- and recurses forever when the
path rewrite changes nothing (RecursionError on ``import dml_numba.cuda``, and on ``from
dml_numba.cuda import <a name it does not have>``). This finder, placed ahead of it, resolves
our own ``dml_numba.cuda*`` modules with the standard path finder and reports a missing one
itself (ImportError, as for any package).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

_PREFIX = __name__.rsplit(".", 1)[0] + ".cuda"


class _OwnCudaPackageFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == _PREFIX or name.startswith(_PREFIX + "."):
            spec = importlib.machinery.PathFinder.find_spec(name, path, target)
            if spec is None:  # ours and missing: say so here, before the redirector recurses
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return spec
        return None


def install() -> None:
    if not any(isinstance(f, _OwnCudaPackageFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _OwnCudaPackageFinder())
