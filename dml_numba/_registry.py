"""(descriptor type, device) -> lowering: the one dispatch path. Backends register themselves.

A device's package is imported the first time the device is asked for; importing it registers
its binding strategy and lowerings, or records why it cannot run here.
"""
from __future__ import annotations

import importlib
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


def register(desc_type, device: str):
    """Decorator: ``@register(Padding1OperatorDesc, "cpu")`` on ``factory(desc, options)``."""

    def deco(factory):
        _lowerings[(desc_type, device)] = factory
        return factory

    return deco


def _load(name: str) -> None:
    if name in _devices or name in _unavailable:
        return
    if name not in _DEVICE_MODULES:
        raise ValidationError(f"compile_operator.device: {name!r} is invalid; expected one of "
                              f"{', '.join(map(repr, _DEVICE_MODULES))}")
    with _lock:
        if name not in _devices and name not in _unavailable:
            try:
                importlib.import_module(_DEVICE_MODULES[name])
            except ImportError as exc:
                mark_unavailable(name, f"importing {_DEVICE_MODULES[name]} failed: {exc}")
            if name not in _devices and name not in _unavailable:
                mark_unavailable(name, "the backend did not register itself")


def get_device(name: str):
    if not isinstance(name, str):
        raise ValidationError(f"compile_operator.device: {name!r} is invalid; expected one of "
                              f"{', '.join(map(repr, _DEVICE_MODULES))}")
    _load(name)
    if name in _unavailable:
        raise DeviceUnavailableError(f"device {name!r} is not usable here: {_unavailable[name]}")
    return _devices[name]


def get_lowering(desc_type, device: str):
    get_device(device)
    try:
        return _lowerings[(desc_type, device)]
    except KeyError:
        raise ValidationError(f"compile_operator.desc: {desc_type.__name__} is invalid on device "
                              f"{device!r}; no lowering is registered") from None


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
