"""Binding arrays to tensor descs (host side), the overlap rule, and what the functional layer
accepts as an array.

Binding rule: an array whose shape equals the desc's sizes and whose dtype matches is that
tensor, whatever its own memory layout. A one-dimensional buffer of that dtype holding at least
``extent_bytes`` (the last element's offset + 1, times the element size, computed exactly in
Python integers) is read (or written) the way DirectML reads a bound buffer: coordinate ``c``
lives at element ``sum(c[d] * strides[d])``; packed strides when the desc has none; stride 0
broadcasts. Shape equality is tested first, so a rank-1 desc bound to an array of exactly its
size is that tensor.
"""
from __future__ import annotations

import operator

import numpy as np

from . import _interop
from ._errors import ValidationError
from .tensor import TensorDesc


def _where(owner: str, field: str) -> str:
    return f"{owner}.{field}"


def view_host(array, tdesc: TensorDesc, owner: str, field: str, *, writable: bool = False):
    """The N-d view of ``array`` through which the kernel reads or writes tensor ``tdesc``."""
    if (type(array) is np.ndarray and array.shape == tdesc.sizes and array.dtype == tdesc.dtype
            and (not writable or array.flags.writeable)):
        return array  # the common case, decided before building any message
    where = _where(owner, field)
    if isinstance(array, np.ma.MaskedArray):
        raise ValidationError(f"{where}: a masked array is invalid; expected a plain "
                              "numpy.ndarray (the mask would be ignored: use .filled() or .data)")
    if not isinstance(array, np.ndarray):
        if hasattr(array, "__cuda_array_interface__"):
            raise ValidationError(f"{where}: a CUDA device array is invalid on a host device; "
                                  "expected a numpy.ndarray (use device='cuda')")
        raise ValidationError(f"{where}: {type(array).__name__} is invalid; expected a "
                              "numpy.ndarray")
    if array.dtype != tdesc.dtype:
        native = "" if array.dtype.isnative else (
            " (non-native byte order: convert with .astype(a.dtype.newbyteorder('=')))")
        shown = array.dtype if array.dtype.isnative else array.dtype.str
        raise ValidationError(f"{where}: dtype {shown} is invalid{native}; expected "
                              f"{tdesc.dtype} ({tdesc.data_type.name})")
    if writable and not array.flags.writeable:
        raise ValidationError(f"{where}: a read-only array is invalid; expected a writable array")
    if array.shape == tdesc.sizes:
        return array
    if array.ndim == 1:
        need = tdesc.extent_bytes  # exact, in Python integers: never DMLCalcBufferTensorSize
        if array.nbytes < need:
            raise ValidationError(
                f"{where}: a buffer of {array.nbytes} bytes is invalid; expected at least "
                f"{need} bytes (the last element's offset + 1, times {tdesc.dtype.itemsize}, for "
                f"sizes {tdesc.sizes}, strides {tdesc.strides})")
        if writable and tdesc.has_overlapping_elements():
            raise ValidationError(f"{where}: strides {tdesc.strides} are invalid for an output; "
                                  "expected strides that give every element its own address")
        item = array.strides[0]
        return np.lib.stride_tricks.as_strided(
            array, shape=tdesc.sizes, strides=tuple(s * item for s in tdesc.element_strides),
            writeable=writable)
    raise ValidationError(f"{where}: shape {array.shape} is invalid; expected {tdesc.sizes} or a "
                          f"1-D buffer of at least {tdesc.extent_bytes} bytes")


def as_array(value, owner: str, field: str):
    """What the functional layer takes: anything ``np.asarray`` accepts (lists, scalars, objects
    with ``__array__``); CUDA device arrays pass through. Masked arrays and object dtype are
    refused; a non-native byte order is converted to native."""
    if type(value) is not np.ndarray and (
            _interop.kind(value) == "torch" and not _interop.on_gpu(value) or
            _interop.is_tracer(value)):
        # a PyTorch CPU (or meta) tensor: viewed, not copied; or refused, naming what it is
        value = _interop.host_view(value, _where(owner, field))
    if type(value) is np.ndarray and value.dtype.isnative and value.dtype.kind != "O":
        return value
    where = _where(owner, field)
    if isinstance(value, np.ma.MaskedArray):
        raise ValidationError(f"{where}: a masked array is invalid; expected a plain array (the "
                              "mask would be ignored: use .filled() or .data)")
    if (hasattr(value, "__cuda_array_interface__") or getattr(value, "__cuda_ndarray__", False)) \
            and not isinstance(value, np.ndarray):  # a device array (the simulator's too)
        return value
    try:
        array = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - whatever NumPy refuses, said as ours
        raise ValidationError(f"{where}: {type(value).__name__} is invalid; expected an array or "
                              f"something numpy.asarray accepts ({exc})") from None
    if array.dtype.kind in "OUSV":
        raise ValidationError(
            f"{where}: dtype {array.dtype} is invalid; expected a numeric "
            "array (one of float32, float16, float64, int8..int64, uint8..uint64)"
        )
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def address(a) -> int | None:
    """The address of an array's first byte: a device array's (``__cuda_array_interface__``),
    the host array's a CUDA simulator's array wraps (``_ary``), or NumPy's; None for anything
    else. What :func:`overlaps`, :func:`same_view` and a compiled graph's arena read."""
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return cai["data"][0]
    a = getattr(a, "_ary", a)
    return a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else None


def overlaps(a, b) -> bool:
    """Whether two arrays may share memory: NumPy arrays exactly where that is cheap (else
    assumed to); device arrays by their pointer ranges; the CUDA simulator's arrays, which wrap
    host arrays (``_ary``), by those."""
    if a is b:
        return True
    if hasattr(a, "__cuda_array_interface__") and hasattr(b, "__cuda_array_interface__"):
        lo_a, lo_b = address(a), address(b)
        return lo_a < lo_b + b.nbytes and lo_b < lo_a + a.nbytes
    a, b = getattr(a, "_ary", a), getattr(b, "_ary", b)
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return False
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=100_000))
    except np.exceptions.TooHardError:
        return True


def same_view(a, b) -> bool:
    """Whether two arrays are one view of the same memory: the same address, shape, strides
    and type (NumPy's, a device array's ``__cuda_array_interface__``, or the host arrays the
    CUDA simulator's wrap, as :func:`overlaps` reads them)."""
    if a is b:
        return True
    fa = getattr(a, "__cuda_array_interface__", None)
    fb = getattr(b, "__cuda_array_interface__", None)
    if fa is not None and fb is not None:
        return (fa["data"][0] == fb["data"][0] and tuple(fa["shape"]) == tuple(fb["shape"])
                and fa.get("strides") == fb.get("strides") and fa["typestr"] == fb["typestr"])
    a, b = getattr(a, "_ary", a), getattr(b, "_ary", b)
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return False
    return (address(a) == address(b) and a.shape == b.shape and a.strides == b.strides
            and a.dtype == b.dtype)


def check_no_overlap(out, inputs, owner: str, field: str = "out", *,
                     in_place: bool = False) -> None:
    """Refuse an ``out`` that shares memory with any input (exact test when it is cheap);
    ``in_place``: but not one that is an input's very view (:func:`same_view`: an operator
    that runs in place, ``OperatorDesc.in_place``)."""
    for i, a in enumerate(inputs):
        if in_place and same_view(a, out):
            continue
        if a is not out and a.base is None and out.base is None:
            continue  # two separate allocations cannot overlap
        if isinstance(a, np.ndarray) and np.may_share_memory(out, a):
            try:
                overlap = np.shares_memory(out, a, max_work=100_000)
            except np.exceptions.TooHardError:
                overlap = True
            if overlap:
                raise ValidationError(f"{owner}.{field}: an array overlapping input {i} is "
                                      "invalid; expected an output that shares no memory with "
                                      "the inputs" + (" (or is one of them, in place)" if in_place
                                                      else ""))


def check_outputs_apart(target, earlier, owner: str, k: int) -> None:
    """Refuse output ``k`` where it overlaps an earlier output of the same call (each output
    is written whole: two sharing memory would overwrite each other); ``earlier``: the outputs
    before it by index, None for one not to compare."""
    for j, prev in enumerate(earlier):
        if prev is not None and overlaps(target, prev):
            raise ValidationError(f"{owner}.out[{k}]: an array overlapping out[{j}] is invalid; "
                                  "expected one array per output, sharing no memory with the "
                                  "others")


def _unbatched(body, *args):
    return body(*args)


def run_each(runs, fresh=(), state=None) -> None:
    """A compiled graph's bound steps called one by one, in order (the default of
    :meth:`HostDevice.new_steps`, and every other device's)."""
    for run in runs:
        run()


def picker(indices):
    """``pick(seq)``: the tuple of ``seq``'s items at ``indices`` (``operator.itemgetter``,
    a tuple even of one index or none)."""
    if not indices:
        return lambda seq: ()
    if len(indices) == 1:
        return lambda seq, i=indices[0]: (seq[i],)
    return operator.itemgetter(*indices)


class HostDevice:
    """Binding for devices that run on NumPy arrays in host memory ("numpy", "cpu").
    ``options``: name -> allowed values of the options every lowering of the device takes;
    ``batch``: what :meth:`new_batch` makes (None: runs called as they are); ``steps``: what
    :meth:`new_steps` makes (None: steps called one by one); ``reserve``: what
    :meth:`before_binding` calls (None: nothing)."""

    def __init__(self, name: str, options: dict | None = None, batch=None, steps=None,
                 reserve=None):
        self.name = name
        self.options = dict(options or {})
        self._batch = batch
        self._steps = steps
        self._reserve = reserve

    def before_binding(self, kernels) -> None:
        """What the calling thread needs before a compiled graph binds the steps of these
        ``kernels`` to it (the CPU's: its kernel scratch grown to the largest any of them
        takes, so that every bound step's views are of one buffer)."""
        if self._reserve is not None:
            self._reserve(kernels)

    def new_batch(self):
        """``batch(body, *args)`` calling ``body(*args)``, for a run of this device's kernels
        decided as one (a compiled graph's steps: the CPU's
        :class:`~dml_numba.cpu._adaptive.AdaptiveBatch`); one per graph."""
        return self._batch() if self._batch is not None else _unbatched

    def new_steps(self):
        """``steps(runs, fresh, state)`` calling a compiled graph's bound steps ``runs`` in
        order (``fresh``: the positions bound anew for this call; ``state``: a dict kept with
        these bindings, for the device), the CPU's as one native call where it can
        (:class:`~dml_numba.cpu._native.NativeSteps`); one per graph."""
        return self._steps() if self._steps is not None else run_each

    def call_plain(self, kernel, owner, plain, made, inputs, out, in_place=False):
        """:meth:`call` where it is plain, decided without its per-argument checks: NumPy
        arrays of exactly the bound ``(shape, dtype)`` pairs ``plain``, and no ``out`` or a
        writable one of the output's ``made``. None where the call is not plain (then
        :meth:`call` decides, and names what is wrong)."""
        for a, (shape, dtype) in zip(inputs, plain):
            if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                return None
        shape, dtype = made
        if out is None:
            y = np.empty(shape, dtype)
            kernel(inputs, y)
            return y
        if (type(out) is np.ndarray and out.shape == shape and out.dtype == dtype
                and out.flags.writeable):
            check_no_overlap(out, inputs, owner, in_place=in_place)
            kernel(inputs, out)
            return out
        return None

    def call(self, kernel, owner, input_specs, inputs, out, out_desc, stream, in_place=False):
        views = self._views(owner, input_specs, inputs, stream)
        if out is None:
            result = target = np.empty(out_desc.sizes, out_desc.dtype)
        else:
            target, result = _bind_out(out, out_desc, owner, "out", views,
                                       in_place=in_place), out
        kernel(views, target)
        return result

    def call_many(self, kernel, owner, input_specs, inputs, outs, out_specs, stream):
        """:meth:`call` for an operator of several outputs: ``outs`` (one array or None per
        output) and ``out_specs`` (``(field, desc)`` per output); the kernel gets the tuple of
        output arrays. Returns the tuple of outputs. Every output is checked against the
        inputs and the outputs before it before anything is written."""
        views = self._views(owner, input_specs, inputs, stream)
        targets, results = [], []
        for k, (o, (_, t)) in enumerate(zip(outs, out_specs)):
            if o is None:
                targets.append(np.empty(t.sizes, t.dtype))
                results.append(targets[-1])
                continue
            targets.append(_bind_out(o, t, owner, f"out[{k}]", views, targets, k))
            results.append(o)
        kernel(views, tuple(targets))
        return tuple(results)

    def _views(self, owner, input_specs, inputs, stream) -> list:
        if stream is not None:
            raise ValidationError(f"{owner}.stream: {stream!r} is invalid; expected None on the "
                                  f"{self.name!r} device (streams are CUDA's)")
        return [view_host(a, t, owner, f) for a, (f, t) in zip(inputs, input_specs)]


def _bind_out(out, tdesc, owner: str, field: str, views, earlier=(), k: int = 0, *,
              in_place: bool = False):
    """The writable view of an ``out`` array, refused where it overlaps an input (but for
    being its very view, ``in_place``) or an earlier output of the same call."""
    target = view_host(out, tdesc, owner, field, writable=True)
    check_no_overlap(target, views, owner, field, in_place=in_place)
    check_outputs_apart(target, earlier, owner, k)
    return target
