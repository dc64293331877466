"""Operator descriptors: one module per operator (descriptors, validation, the one shape rule,
metadata). Pure Python over ints and tuples: nothing here imports a backend, code generation or
dispatch. Each module's public names (its ``__all__``, else its classes) are re-exported."""
import importlib as _importlib
import pkgutil as _pkgutil

__all__ = []
for _info in _pkgutil.iter_modules(__path__):
    if _info.name.startswith("_"):
        continue
    _mod = _importlib.import_module(f"{__name__}.{_info.name}")
    _names = getattr(_mod, "__all__", None) or [
        n for n, v in vars(_mod).items() if isinstance(v, type) and v.__module__ == _mod.__name__
        and not n.startswith("_")]
    for _n in _names:
        globals()[_n] = getattr(_mod, _n)
    __all__ += _names
