"""(descriptor type, device) -> lowering: the one dispatch path. Backends register themselves.

A device's package is imported the first time the device is asked for; importing it imports
every operator module of the package (:func:`import_lowerings`, no list to keep), which
registers the lowerings, and registers the device's binding or records why it cannot run here.

Options: a device declares the options every lowering takes (``device.options``), a lowering
those it adds (``register(..., options=...)``); :func:`check_options` validates both, in one
place, before anything is built.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
import threading

from ._errors import DeviceUnavailableError, ValidationError

_DEVICE_MODULES = {"numpy": "dml_numba.vectorized", "cpu": "dml_numba.cpu",
                   "cuda": "dml_numba.cuda"}
_devices: dict = {}
_lowerings: dict = {}
_unavailable: dict[str, str] = {}
_lock = threading.Lock()


def register_device(device) -> None:
    _devices[device.name] = device


def mark_unavailable(name: str, reason: str) -> None:
    _unavailable[name] = reason


_options: dict = {}


def register(desc_type, device: str, *, options: dict | None = None):
    """Decorator: ``@register(Padding1OperatorDesc, "cpu")`` on ``factory(desc, options)``.
    ``options``: name -> allowed values of the options this lowering adds to its device's."""

    def deco(factory):
        _lowerings[(desc_type, device)] = factory
        _options[(desc_type, device)] = dict(options or {})
        return factory

    return deco


def import_lowerings(package: str, path) -> None:
    """Import every operator module of a backend package (names not starting with ``_``)."""
    for info in pkgutil.iter_modules(path):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")


def check_options(desc_type, device: str, options: dict) -> None:
    """Refuse unknown options and values not allowed, naming the device and what it takes."""
    device = split_device(device)[0]
    allowed = dict(getattr(_devices.get(device), "options", {}))
    allowed.update(_options.get((desc_type, device), {}))
    for name, value in options.items():
        if name not in allowed:
            takes = ", ".join(repr(n) for n in allowed) or "none"
            raise ValidationError(f"compile_operator.options: {name!r} is invalid; expected "
                                  f"{'one of ' if allowed else ''}{takes} on the {device!r} "
                                  f"device for {desc_type.__name__}")
        values = allowed[name]
        if not any(value is v or (type(value) is type(v) and value == v) for v in values):
            raise ValidationError(f"compile_operator.{name}: {value!r} is invalid; expected one "
                                  f"of {', '.join(repr(v) for v in values)}")


def lowering_options(desc_type, device: str) -> dict:
    """The options a lowering adds to its device's: name -> allowed values."""
    lowering_for(desc_type, device)
    return dict(_options.get((desc_type, device), {}))


def option_values(desc_type, device: str, name: str) -> tuple:
    """The values but None that a device's lowering of ``desc_type`` declares for its option
    ``name`` (what a graph rule asks of a backend: for ``input_padding``, the padding modes
    its kernels read their input through); empty where it declares none, or where the device
    has no such lowering."""
    try:
        allowed = lowering_options(desc_type, device).get(name, ())
    except ValidationError:
        return ()
    return tuple(v for v in allowed if v is not None)


def has_lowering(desc_type, device: str) -> bool:
    """Whether ``device`` has a lowering of ``desc_type`` (what a graph rule asks before it
    makes a descriptor only some devices run); False where its backend cannot be imported."""
    try:
        lowering_for(desc_type, device)
    except (ValidationError, ImportError):
        return False
    return True


def runs_as_one(desc, device: str) -> bool:
    """Whether ``device`` computes ``desc``, an operator standing for several nodes, as one
    kernel: what its lowering's ``runs_as_one(desc)`` says (what a graph rule asks before it
    makes such a descriptor, where the device's kernel would otherwise run the nodes one by
    one with a buffer of its own); False where the device has no lowering of it or its lowering
    does not say."""
    if not has_lowering(type(desc), device):
        return False
    says = getattr(lowering_for(type(desc), device), "runs_as_one", None)
    return bool(says is not None and says(desc))


def load_backend(device: str) -> None:
    """Import a device's backend package (its lowerings register themselves), usable here or
    not."""
    importlib.import_module(_DEVICE_MODULES[device])


def lowering_for(desc_type, device: str):
    """The registered factory, importing the backend even when its device is unavailable (the
    CUDA kernels compile to PTX without a GPU)."""
    importlib.import_module(_DEVICE_MODULES[device])
    try:
        return _lowerings[(desc_type, device)]
    except KeyError:
        raise ValidationError(f"compile_operator.desc: {desc_type.__name__} is invalid on device "
                              f"{device!r}; no lowering is registered") from None



def _load(name: str) -> None:
    if name in _devices or name in _unavailable:
        return
    with _lock:
        if name not in _devices and name not in _unavailable:
            try:
                importlib.import_module(_DEVICE_MODULES[name])
            except ImportError as exc:
                mark_unavailable(name, f"importing {_DEVICE_MODULES[name]} failed: {exc}")
            if name not in _devices and name not in _unavailable:
                mark_unavailable(name, "the backend did not register itself")


def split_device(name) -> tuple[str, int | None]:
    """("cuda", 1) for "cuda:1", (name, None) for a plain name (CUDA's devices are numbered as
    PyTorch and CuPy number them)."""
    if isinstance(name, str) and re.fullmatch(r"cuda:[0-9]{1,6}", name):
        return "cuda", int(name[5:])
    return name, None


def check_device_name(name) -> None:
    """Refuse a device that is not one of the known names (a list, None, a typo), naming them."""
    base, _ = split_device(name)
    if not isinstance(base, str) or base not in _DEVICE_MODULES:
        raise ValidationError(f"compile_operator.device: {name!r} is invalid; expected one of "
                              f"{', '.join(map(repr, _DEVICE_MODULES))} (or 'cuda:N', the "
                              "N-th GPU)")


def get_device(name: str):
    check_device_name(name)
    base, index = split_device(name)
    _load(base)
    if base in _unavailable:
        raise DeviceUnavailableError(f"device {name!r} is not usable here: {_unavailable[base]}")
    return _devices[base] if index is None else _devices[base].on(index)


def get_lowering(desc_type, device: str):
    """The factory for a usable device (DeviceUnavailableError otherwise)."""
    get_device(device)
    return lowering_for(desc_type, split_device(device)[0])


def device_status() -> dict[str, str]:
    """Every known device and either 'available' or why not (imports each backend)."""
    status = {}
    for name in _DEVICE_MODULES:
        try:
            get_device(name)
            status[name] = "available"
        except DeviceUnavailableError:
            status[name] = _unavailable[name]
    return status


def available_devices() -> list[str]:
    return [n for n, s in device_status().items() if s == "available"]
