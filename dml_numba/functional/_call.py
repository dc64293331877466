"""The functional layer's call: the memo keyed by shapes, dtypes and parameters, ``run``
(descriptor, compile through the shared cache, call), and the parameters' coercions every
function shares."""
from __future__ import annotations

import numbers

import numpy as np

from .. import _interop
from .._api import compile_operator
from .._binding import as_array
from .._cache import cache, call_key, freeze
from .._errors import Checker, ValidationError
from ..ops.padding import PaddingMode


def _tensor_key(a):
    """A tensor input in the memo's key: its type, shape and dtype (a compiled operator binds
    any memory layout of that shape)."""
    if a is None:
        return None
    shape = a.shape
    return type(a), shape if type(shape) is tuple else tuple(shape), a.dtype


def _param_key(value):
    """A parameter in the memo's key, by value: arrays (any rank, 0-d included) by dtype, shape
    and bytes, sequences element by element, everything else through :func:`freeze` (floats by
    bits, bools apart from ints, NumPy scalars by their bits in their own type). Two calls
    whose parameters differ in value never share a key."""
    t = type(value)
    if t is int or t is str or value is None:
        return value
    if t is tuple:
        for v in value:
            if type(v) is not int:
                break
        else:
            return value  # the common case: a tuple of Python integers keys as itself
    if isinstance(value, (list, tuple)):
        return (t.__name__,) + tuple(_param_key(v) for v in value)
    if not isinstance(value, np.ndarray) and (hasattr(value, "__array__") or
                                              hasattr(value, "__dlpack__")):
        try:  # another library's array (a PyTorch tensor...): by its values
            value = np.asarray(value)
        except Exception:  # noqa: BLE001 - not readable here: no memo
            return _UNKEYED
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    frozen = freeze(value)
    # freeze() passes unknown objects through: they may be mutable and hash by identity
    return _UNKEYED if frozen is value else frozen


def _named(exc: ValidationError, name: str) -> ValidationError:
    """A descriptor's or binding's error as the functional call's: ``padding.start_padding``
    where the descriptor says ``Padding1OperatorDesc.start_padding`` (one prefix, the name the
    user called, whichever check found it)."""
    message = str(exc)
    owner, dot, rest = message.partition(".")
    if dot and owner.endswith("OperatorDesc"):
        return ValidationError(f"{name}.{rest}")
    if message.startswith("DataType: "):  # an array's type no DataType has
        return ValidationError(f"{name}.dtype: {message[len('DataType: '):]}")
    return exc


#: a key part that makes the memo key unhashable: the call runs without the memo
_UNKEYED = []


def _simple(params) -> bool:
    """Whether every parameter is a Python integer, a name, None or a tuple of Python integers:
    then the parameters key the memo as they are (hashable, and equal only when equal in
    value and type)."""
    for p in params:
        t = type(p)
        if t is int or t is str or p is None:
            continue
        if t is not tuple:
            return False
        for v in p:
            if type(v) is not int:
                return False
    return True


#: the operators of the latest distinct calls, in front of the cache (one dictionary lookup
#: instead of the cache's ordered bookkeeping), for the cache's generation ``_recent_of[0]``
_recent: dict = {}


_recent_of = [0]


RECENT = 64


def _remember(key, op) -> None:
    if _recent_of[0] != cache.generation or len(_recent) >= RECENT:
        _recent.clear()  # the cache was cleared, or too many distinct calls: start again
        _recent_of[0] = cache.generation
    _recent[key] = op


def run(name, tensors, params, make_desc, inputs, device, out, like=None, originals=None):
    """Run a call. The compiled operator of ``make_desc(*tensors, *params)`` is memoised on the
    call's tensor inputs (type, shape, dtype), its parameters (by value) and the device, so a
    repeated call skips building the descriptor; a parameter that cannot be keyed (unhashable)
    skips the memo. The result is of ``like``'s kind (a PyTorch tensor for a tensor input:
    :mod:`._interop`). ``originals``: the inputs as the caller gave them (default ``(like,)``
    for one input): PyTorch tensors among them that require grad make the call a node of
    PyTorch's autograd graph."""
    simple = _simple(params) and type(device) is str
    key = call_key(name, tuple([_tensor_key(a) for a in tensors]),
                   params if simple else tuple([_param_key(p) for p in params]), device)
    if not simple:
        try:
            hash(key)
        except TypeError:  # an unhashable parameter: no memo, same result
            key = None
    try:
        if key is None:
            op = compile_operator(make_desc(*tensors, *params), device)
        else:
            op = _recent.get(key) if _recent_of[0] == cache.generation else None
            if op is None:
                op = cache.get_or_build(
                    key, lambda: compile_operator(make_desc(*tensors, *params), device))
                _remember(key, op)
        originals = originals or ((like,) if len(inputs) == 1 else ())
        if like is not None and _interop.needs_grad(originals):  # PyTorch autograd
            if len(op.desc.bound_outputs()) > 1:
                raise ValidationError(f"{op.desc.op_name()}: a torch tensor that requires grad "
                                      "is invalid with several outputs; expected one that does "
                                      "not (no gradient is defined here: pass x.detach())")
            if out is not None:
                _interop.check_out(out, "out")
            return _interop.with_grad(op, originals, out)
        result = op(*inputs, out=out)
    except ValidationError as exc:
        raise _named(exc, name) from None
    if type(like) is np.ndarray or out is not None:
        return result
    k = _interop.kind(like)
    if k is None:
        return result
    if isinstance(result, tuple):  # several outputs (max pooling's indices)
        return tuple(_interop.as_kind(r, k) for r in result)
    return _interop.as_kind(result, k)


def _scalar(value):
    """A 0-d array as the Python scalar it holds (what the descriptors' checks take), another
    library's array (a PyTorch tensor) as a NumPy one; anything else as is."""
    if _interop.kind(value) is not None:
        value = np.asarray(_interop.host_view(value))
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


#: NumPy's names for DirectML's modes, where they mean the same (``numpy.pad``'s "reflect" is
#: DirectML's REFLECTION; "symmetric", "edge", "wrap" and "constant" are spelled alike)
ALIASES = {PaddingMode: {"REFLECT": "REFLECTION"}}


def _enum(owner, field, value, enum_type):
    """An enum member from a member, its value or its name (any case, NumPy's names too)."""
    value = _scalar(value)
    if isinstance(value, str):
        name = value.upper()
        try:
            return enum_type[ALIASES.get(enum_type, {}).get(name, name)]
        except KeyError:
            aliases = ", ".join(f"{a.lower()} (= {m.lower()})"
                                for a, m in ALIASES.get(enum_type, {}).items())
            Checker(owner).fail(field, value, "expected one of " +
                                ", ".join(m.name.lower() for m in enum_type) +
                                (f", or NumPy's {aliases}" if aliases else ""))
    return Checker(owner).enum(field, value, enum_type)


def _tuple(value, default=None):
    """A sequence (a tuple, a list, a 1-D array...) as a tuple (the default for None); anything
    else as is, for the checks to name."""
    if value is None:
        return default
    value = _scalar(value)
    if hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        return tuple(_scalar(v) for v in value)
    return value


def _per_axis(value, count: int, default=None):
    """A parameter with one entry per axis: a single integer (a Python or NumPy integer, a 0-d
    array) stands for the same value on each of ``count`` axes; otherwise :func:`_tuple`."""
    value = _scalar(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (value,) * count
    return _tuple(value, default)


def _like(x, value, owner: str, field: str):
    """A filter or bias in ``x``'s data type: given without a type of its own (a list, a
    number), it takes ``x``'s; an array of another type is cast where every value is exact in
    ``x``'s type, and refused with what to cast otherwise. Host arrays only (device arrays are
    left to the descriptor's checks)."""
    a = as_array(value, owner, field)
    if not hasattr(value, "dtype") and isinstance(a, np.ndarray) and hasattr(x, "dtype") and \
            not isinstance(x, np.ndarray):  # a list or number beside a device array: its type
        return _like(np.empty(0, np.dtype(str(x.dtype))), value, owner, field)
    if not (isinstance(x, np.ndarray) and isinstance(a, np.ndarray)) or a.dtype == x.dtype:
        return a
    typed = hasattr(value, "dtype")
    with np.errstate(all="ignore"):
        b = a.astype(x.dtype)
        back = b.astype(a.dtype)
        exact = a.dtype.kind in "biuf" and (
            np.array_equal(back, a, equal_nan=True) or not typed and
            np.array_equal(np.isfinite(back), np.isfinite(a)))  # a list: rounding is fine
    if exact:
        return b
    Checker(owner).fail(f"{field}.dtype", a.dtype.name, f"expected {x.dtype.name}, the data type "
                        f"of x, or values exact in it: cast one of them, e.g. "
                        f"{field}.astype(np.{x.dtype.name}) or x.astype(np.{a.dtype.name})")


def _batch_axis(x, expected: int, by: str, owner: str) -> None:
    """Name a missing batch axis: an (C, spatial...) input where (N, C, spatial...) is read."""
    ndim = getattr(x, "ndim", None)
    if ndim is not None and ndim == expected - 1 and ndim >= 2:
        Checker(owner).fail("x.shape", tuple(x.shape), f"expected {expected} dimensions "
                            f"(N, C, spatial...) for this {by}: is the batch axis missing? "
                            f"x[None] adds it")
