"""compile_operator and the compiled operator: validate -> key -> lowering; bind -> run."""
from __future__ import annotations

import functools

import numpy as np

from . import _interop
from ._binding import HostDevice
from ._cache import cache, operator_key
from ._errors import ValidationError
from ._frozen import as_argument
from ._registry import check_device_name, check_options, get_device, get_lowering
from .ops._base import DESCRIPTOR_TYPES, OperatorDesc


def packed(desc: OperatorDesc) -> OperatorDesc:
    """The desc with every tensor's strides dropped (:meth:`OperatorDesc.packed`)."""
    return desc.packed()


class CompiledOperator:
    """``op(*inputs, out=None)``: inputs in DirectML binding order; returns the output. PyTorch
    CPU tensors and JAX CPU arrays are read in place and the output comes back as the first
    one's kind; an ``out=`` tensor is written in place and returned (:mod:`._interop`).

    An operator of several outputs (max pooling with its indices output) returns the tuple of
    its outputs in binding order; its ``out=`` is None or a sequence of one array (or None: made
    here) per output."""

    def __init__(self, desc, device, kernel):
        self.desc = desc
        self.device = device
        self.kernel = kernel
        self._owner = type(desc).__name__
        self._inputs = desc.bound_inputs()
        self._output = desc.output
        self._outputs = desc.bound_outputs()
        # a host device's plain call (HostDevice.call_plain): decided first
        self._plain = tuple((t.sizes, t.dtype) for _, t in self._inputs) if isinstance(
            device, HostDevice) and len(self._outputs) == 1 else None
        self._made = (self._output.sizes, self._output.dtype)
        self._launch = getattr(device, "run_checked", None)
        self._in_place = desc.in_place  # an output may be an input's very view

    def __call__(self, *inputs, out=None, stream=None):
        if len(inputs) != len(self._inputs):
            names = ", ".join(f for f, _ in self._inputs)
            raise ValidationError(f"{self._owner}: {len(inputs)} inputs are invalid; expected "
                                  f"{len(self._inputs)} ({names})")
        if len(self._outputs) > 1:
            return self._call_many(inputs, out, stream)
        if self._plain is not None and stream is None:
            result = self.device.call_plain(self.kernel, self._owner, self._plain, self._made,
                                            inputs, out, self._in_place)
            if result is not None:
                return result
        for a in inputs:  # NumPy arrays only: the common case, decided first
            if type(a) is not np.ndarray:
                break
        else:
            if out is None or type(out) is np.ndarray:
                return self.device.call(self.kernel, self._owner, self._inputs, inputs, out,
                                        self._output, stream, self._in_place)
        if out is not None:
            _interop.check_out(out, f"{self._owner}.out")
        if _interop.needs_grad(inputs):  # a node of PyTorch's autograd graph
            return _interop.with_grad(self, inputs, out)
        result = self.device.call(
            self.kernel, self._owner, self._inputs,
            [_interop.to_host(a, f"{self._owner}.{f}") for a, (f, _) in zip(inputs, self._inputs)],
            _interop.to_host(out, f"{self._owner}.out"), self._output, stream, self._in_place)
        if out is not None:
            return out
        return _interop.as_kind(result, _interop.first_kind(inputs))

    def _call_many(self, inputs, out, stream):
        """:meth:`__call__` of an operator of several outputs: every input and ``out`` array
        checked, then one call writing them all; the tuple of outputs."""
        n, owner = len(self._outputs), self._owner
        if out is None:
            outs = [None] * n
        elif isinstance(out, (list, tuple)) and len(out) == n:
            outs = list(out)
        else:
            names = ", ".join(f for f, _ in self._outputs)
            raise ValidationError(f"{owner}.out: {type(out).__name__} is invalid; expected None "
                                  f"or a sequence of {n} arrays or None ({names})")
        for k, o in enumerate(outs):
            if o is not None:
                _interop.check_out(o, f"{owner}.out[{k}]")
        if _interop.needs_grad(inputs):
            raise ValidationError(f"{owner}: a torch tensor that requires grad is invalid; "
                                  "expected one that does not (an operator of several outputs "
                                  "has no gradient here: pass x.detach())")
        result = self.device.call_many(
            self.kernel, owner, self._inputs,
            [_interop.to_host(a, f"{owner}.{f}") for a, (f, _) in zip(inputs, self._inputs)],
            [_interop.to_host(o, f"{owner}.out[{k}]") for k, o in enumerate(outs)],
            self._outputs, stream)
        kind = _interop.first_kind(inputs)
        return tuple(o if o is not None else _interop.as_kind(r, kind)
                     for o, r in zip(outs, result))

    def run_checked(self, inputs, out) -> None:
        """Write ``out`` from ``inputs`` with nothing checked: the caller has made sure they are
        arrays of this device with exactly the bound shapes and dtypes and that ``out`` is a
        writable array of the output's that overlaps none of them (a compiled graph's steps,
        whose buffers are its own and whose inputs and outputs were checked at its entry).
        The kernel is called directly (the checks of :meth:`__call__` a step saved: ~5 us on a
        host device; on an H200 a convolution step's host time went from 73-84 us to 51-58)
        on a host device and on a device that launches checked arrays itself
        (``run_checked``: the CUDA device, given its own device arrays); elsewhere this is
        ``self(*inputs, out=out)``."""
        if self._plain is not None:
            self.kernel(inputs, out)
        elif self._launch is not None:
            self._launch(self.kernel, inputs, out)
        else:
            self(*inputs, out=out)

    def bind_checked(self, inputs, out):
        """:meth:`run_checked` of these arrays as a call of no arguments (a compiled graph's
        step, called again while its arrays stay the same): a host kernel's ``bind`` settles
        now what the arrays' identities decide (views, a model's packed filter); what their
        contents decide happens at each call."""
        if self._plain is not None:
            bind = getattr(self.kernel, "bind", None)  # the numpy device's have none
            if bind is None:
                return functools.partial(self.kernel, inputs, out)
            # a model's constants as the writable arrays over them: the kernels' own types
            return bind([as_argument(a) for a in inputs], out)
        return functools.partial(self.run_checked, inputs, out)

    @property
    def source(self) -> str | None:
        """The generated source of the kernel (None for the vectorised device)."""
        return getattr(self.kernel, "source", None)

    def __repr__(self):
        return f"<CompiledOperator {self._owner} on {self.device.name!r}>"


def compile_operator(desc, device: str = "cpu", **options) -> CompiledOperator:
    """Compile ``desc`` for ``device`` ("numpy", "cpu" or "cuda"); cached per desc and options.

    Options (CPU): ``parallel`` = None (automatic by work size and then by measurement), True
    or False; convolution also ``algorithm`` = None (automatic), "direct", "gemm", "blocked" or
    "winograd" (F(4x4, 3x3): 2-D float32 3x3 convolutions with unit strides and dilations and one
    group; its rounding: docs/SEMANTICS.md, convolution),
    and ``tune`` = None (``DML_NUMBA_TUNE``, default "estimate"), "off", "estimate", "quick" or
    "exhaustive" (the README's "Kernels tuned to the machine"). CUDA: convolution and LP
    pooling take ``algorithm`` = None (automatic), "direct" or "tiled" (shared memory).
    Convolution and LP pooling take ``input_padding`` = None or a PaddingMode name but CONSTANT
    ("EDGE", "REFLECTION", "SYMMETRIC", "WRAP") on "cpu" and "cuda": the descriptor's start and
    end padding read the input through that mode instead of zeros (what a graph's padding node
    in front folds into; the CPU's convolution takes it with the blocked and direct kernels).
    Unknown options and values are a ValidationError on every device.
    """
    _check_desc(desc)
    check_device_name(device)
    opts = tuple(sorted(options.items())) if options else ()
    return cache.get_or_build(operator_key(desc, device, opts),
                              lambda: _build(desc, device, dict(opts)))


class ChosenOperator:
    """What :func:`compile_operator` would build, chosen and generated but not compiled: the
    descriptor, the device, the kernel chosen (its ``key`` and plan where it has them) and its
    ``source``; ``build()`` compiles it (through the cache, as ``compile_operator``)."""

    def __init__(self, desc, device: str, options: dict, kernel):
        self.desc, self.device, self.options, self.kernel = desc, device, options, kernel

    @property
    def source(self) -> str | None:
        """The generated source of the chosen kernel (None for the vectorised device)."""
        return getattr(self.kernel, "source", None)

    @property
    def key(self):
        """The chosen kernel's ``KernelKey`` (its plan included), or None where it has none."""
        return getattr(self.kernel, "key", None)

    def build(self) -> CompiledOperator:
        return compile_operator(self.desc, self.device, **self.options)

    def __repr__(self):
        label = getattr(self.key, "op", None) or type(self.desc).__name__
        return f"<ChosenOperator {label} on {self.device!r}: not compiled>"


def choose_operator(desc, device: str = "cpu", **options) -> ChosenOperator:
    """The stages :func:`compile_operator` runs, without the last: the descriptor checked
    (describe), the kernel chosen for this machine and its source generated (choose: the
    tuner's wisdom or the static rule, nothing timed), nothing compiled (build: ``.build()``).
    For reading what would run, and for tools that need sources without a compiler. Options as
    :func:`compile_operator`'s."""
    from ._diskcache import choosing

    _check_desc(desc, "choose_operator")
    check_device_name(device)
    with choosing():
        op = _build(desc, device, dict(options))
    return ChosenOperator(desc, device, dict(options), op.kernel)


def _check_desc(desc, owner: str = "compile_operator") -> None:
    if type(desc) not in DESCRIPTOR_TYPES:
        base = next((b for b in type(desc).__mro__ if b in DESCRIPTOR_TYPES), None)
        names = ", ".join(sorted(t.__name__ for t in DESCRIPTOR_TYPES))
        raise ValidationError(f"{owner}.desc: {type(desc).__name__} is invalid; expected "
                              f"one of dml_numba's operator descriptors ({names})" +
                              (f", not a subclass of {base.__name__}" if base else ""))
    if desc.output is None:  # an activation's fused form: parameters, not an operator
        raise ValidationError(f"{owner}.desc.{desc.output_field}: None is invalid; expected a "
                              f"TensorDesc ({type(desc).__name__} without tensors is the form "
                              "fused into another operator: give it input_tensor and "
                              "output_tensor to run it on its own)")


@functools.cache
def _physical_memory() -> int | None:
    try:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return None


def check_allocatable(desc) -> None:
    """Refuse, before compiling, an output larger than this machine's memory: it could never be
    allocated (or bound: outputs may not alias, so a buffer needs every byte)."""
    outs = desc.bound_outputs()  # every output needs its own buffer
    need = sum(t.element_count * t.data_type.itemsize for _, t in outs)
    mem = _physical_memory()
    if mem is not None and need > mem:
        what = "the output needs" if len(outs) == 1 else f"the {len(outs)} outputs need"
        raise ValidationError(
            f"{type(desc).__name__}.{desc.output_field}.sizes: {desc.output.sizes} is invalid; "
            f"{what} {need} bytes, expected at most this machine's memory ({mem} bytes)")


def _build(desc, device, options):
    check_allocatable(desc)
    dev = get_device(device)
    canon = packed(desc.canonical())
    factory = get_lowering(type(canon), device)
    check_options(type(canon), device, options)
    return CompiledOperator(desc, dev, factory(canon, options))
