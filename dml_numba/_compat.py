"""Work-arounds for third-party import quirks.

numba-cuda (0.30) installs a meta-path finder at startup that redirects any module whose name
*contains* "numba.cuda" -- which includes ``dml_numba.cuda`` -- and recurses forever when the
path rewrite changes nothing (RecursionError on ``import dml_numba.cuda``). This finder, placed
ahead of it, resolves our own ``dml_numba.cuda*`` modules with the standard path finder.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

_PREFIX = __name__.rsplit(".", 1)[0] + ".cuda"


class _OwnCudaPackageFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == _PREFIX or name.startswith(_PREFIX + "."):
            return importlib.machinery.PathFinder.find_spec(name, path, target)
        return None


def install() -> None:
    if not any(isinstance(f, _OwnCudaPackageFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _OwnCudaPackageFinder())
