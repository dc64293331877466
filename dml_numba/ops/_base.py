"""What every operator descriptor shares: frozen, validated on construction, canonicalisable."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import ClassVar

import numpy as np

from .._dims import dilated_extent
from .._dtypes import DataType
from .._errors import Checker, ValidationError
from ..tensor import TensorDesc

#: every descriptor class the library defines (registered as each is defined); a subclass from
#: elsewhere is refused by compile_operator, since it could change what gets generated
DESCRIPTOR_TYPES: set = set()


class OperatorDesc:
    """Mixin for the frozen operator dataclasses.

    ``__post_init__`` turns sequences into tuples and integers into enums (so the desc is
    hashable and canonical) and validates every field; an invalid desc cannot be constructed.
    """

    #: names of the tensor fields bound as inputs, in DirectML binding order
    input_fields: ClassVar[tuple[str, ...]] = ("input_tensor",)
    output_field: ClassVar[str] = "output_tensor"
    #: the optional outputs after the first, in DirectML binding order (max pooling's indices)
    extra_output_fields: ClassVar[tuple[str, ...]] = ()
    #: data movement compares exactly; arithmetic (convolution, pooling) within a tolerance
    exact: ClassVar[bool] = True
    #: the output may be bound to an input's very memory (the same array or view: address,
    #: shape, strides and type), as DirectML lets its element-wise operators run in place: each
    #: output element is computed from the inputs' elements at its own coordinates alone, each
    #: read before that element is written. Any other overlap is refused
    in_place: ClassVar[bool] = False

    @classmethod
    def op_name(cls) -> str:
        """The operator's name: its module's (``padding``, ``lp_pooling``, ...), shared by every
        folder of its vertical slice."""
        return cls.__module__.rsplit(".", 1)[-1]

    # -- metadata for the profiler, the demo and the tests --------------------------------
    def flops(self) -> int:
        """Arithmetic operations of one call (0 for data movement)."""
        return 0

    def bytes_moved(self) -> int:
        """Bytes read from the inputs plus bytes written to the output (packed)."""
        return sum(t.element_count * t.data_type.itemsize
                   for _, t in self.bound_inputs() + self.bound_outputs())

    def __init_subclass__(cls, abstract: bool = False, **kwargs):
        super().__init_subclass__(**kwargs)
        if not abstract and cls.__module__.startswith(__name__.rsplit(".", 1)[0] + "."):
            DESCRIPTOR_TYPES.add(cls)

    def __post_init__(self):
        self._validate(Checker(type(self).__name__))

    def _set(self, name, value):
        object.__setattr__(self, name, value)

    def _validate(self, c: Checker):  # pragma: no cover - every operator overrides it
        raise NotImplementedError

    # -- the window trait: what graph rules and Dask blocks read, never the classes -------
    def window(self) -> Window | None:
        """The window this operator's output slides over input 0's spatial axes (2 on), or
        None where it has none (data movement; a transposed convolution, whose outputs gather
        from a whole region). A descriptor with a window also implements :meth:`rewindow`."""
        return None

    def rewindow(self, input_tensor: TensorDesc, output_tensor: TensorDesc, strides,
                 start_padding, end_padding) -> OperatorDesc | None:
        """The same operator with its window moved: reading ``input_tensor`` with these
        strides and padding into ``output_tensor`` (every other field as it is), or None where
        no such descriptor is valid."""
        try:
            return replace(self, input_tensor=input_tensor, output_tensor=output_tensor,
                           strides=tuple(strides), start_padding=tuple(start_padding),
                           end_padding=tuple(end_padding))
        except ValidationError:
            return None

    def as_fused_activation(self):
        """The fused form of this operator where it is an activation of its own (one formula
        applied to each element of its one input: what an operator's ``fused_activation``
        slot takes), else None (the trait the graph's fuse rule reads)."""
        return None

    #: the operator's result may take an addend before its fused activation (one pass over
    #: memory for a residual connection: :class:`~.fused_add.FusedAddDesc`, the trait the
    #: graph's residual rule reads of a producer)
    takes_addend: ClassVar[bool] = False

    def is_sum(self) -> bool:
        """Whether this operator's output is its two inputs' sum in floating point, element by
        element, every tensor read whole (nothing broadcast), then its ``fused_activation``
        (the trait the graph's residual rule reads of an addition)."""
        return False

    def is_pointwise(self) -> bool:
        """Whether each output element is a weighted sum over the channels of the input pixel
        at its own coordinates alone (a 1 x 1 FORWARD convolution of one group, unit strides
        and dilations, no padding), then its ``fused_activation``: the trait the graph's pair
        rule reads of the node in front of a depthwise one."""
        return False

    def is_depthwise(self) -> bool:
        """Whether each output channel is a window over its own input channel alone (a FORWARD
        convolution with one input and one output channel a group), then its
        ``fused_activation``: the trait the graph's pair rule reads of a node."""
        return False

    def joined_parts(self) -> tuple | None:
        """Where the output is its inputs placed one after another along an axis, each input
        copied whole and unchanged (a join's): each input's offset in the output's packed
        layout, in bytes, where every axis before that one has size 1 (each input one run of
        the output); else None. The trait the graph's join in place reads."""
        return None

    #: each output batch element depends on the same input batch element alone (and on the
    #: other inputs, filters and biases, whole): Dask blocks may run it on a range of the batch
    batch_separable: ClassVar[bool] = False

    # -- what binding and dispatch need ---------------------------------------------------
    def bound_inputs(self) -> tuple[tuple[str, TensorDesc], ...]:
        """(field, desc) of every input present, in binding order (an absent bias is skipped)."""
        return tuple((f, getattr(self, f)) for f in self.input_fields
                     if getattr(self, f) is not None)

    def bound_outputs(self) -> tuple[tuple[str, TensorDesc], ...]:
        """(field, desc) of every output present, in binding order: the output, then each
        optional one given (max pooling's indices)."""
        return ((self.output_field, self.output),) + tuple(
            (f, getattr(self, f)) for f in self.extra_output_fields if getattr(self, f) is not None)

    @property
    def output(self) -> TensorDesc | None:
        """The (first) output's desc (None only for an activation's fused form)."""
        return getattr(self, self.output_field)

    def canonical(self) -> OperatorDesc:
        """The newest descriptor version this one is equivalent to (itself by default)."""
        return self

    def packed(self) -> OperatorDesc:
        """The desc with every tensor's strides dropped: kernels see N-d views, so buffer
        strides never change generated code and must not split the cache."""
        tensors = {}
        for name in self.input_fields + (self.output_field,) + self.extra_output_fields:
            t = getattr(self, name)
            if t is not None and t.strides is not None:
                tensors[name] = TensorDesc(t.data_type, t.sizes)
        return self.replace_tensors(**tensors) if tensors else self

    def replace_tensors(self, **tensors) -> OperatorDesc:
        """A copy whose tensors are packed (strides dropped): what a kernel on bound views sees."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(tensors)
        return type(self)(**values)


@dataclass(frozen=True)
class Window:
    """A windowed operator's window over its input's spatial axes (the trait of
    :meth:`OperatorDesc.window`): output coordinate ``o`` of spatial axis ``i`` reads input
    coordinates ``o * strides[i] + k * dilations[i] - start_padding[i]`` for ``k <
    sizes[i]``; coordinates outside the input are the padding.

    ``channels``: "same" where output channel ``c`` reads input channel ``c`` alone (pooling),
    "all" where every output channel reads every input channel (of its group: a convolution).
    ``padding_reads_zero``: whether the padding reads as zeros (a convolution, an LP pooling:
    so a CONSTANT padding by +0 in front may be absorbed into it); False for an operator whose
    padding is not a value (a max pooling's never wins).
    """

    sizes: tuple
    strides: tuple
    dilations: tuple
    start_padding: tuple
    end_padding: tuple
    channels: str
    padding_reads_zero: bool

    @property
    def extents(self) -> tuple:
        """Each axis's dilated window, ``(size - 1) * dilation + 1``."""
        return tuple(dilated_extent(k, d) for k, d in zip(self.sizes, self.dilations))

    @property
    def padded(self) -> bool:
        return any(self.start_padding) or any(self.end_padding)


def check_tensor(c: Checker, field: str, value, *, optional: bool = False) -> TensorDesc | None:
    return c.instance(field, value, TensorDesc, "a TensorDesc", optional=optional)


def check_rank(c: Checker, field: str, t: TensorDesc, lo: int, hi: int):
    if not lo <= t.rank <= hi:
        c.fail(f"{field}.sizes", t.sizes,
               f"expected {lo} dimensions" if lo == hi else f"expected {lo} to {hi} dimensions")


def check_type(c: Checker, field: str, t: TensorDesc, allowed, note: str = ""):
    if t.data_type not in allowed:
        names = ", ".join(DataType(a).name for a in allowed)
        c.fail(f"{field}.data_type", t.data_type.name, f"expected one of {names}{note}")


def check_same_type(c: Checker, field: str, t: TensorDesc, ref: TensorDesc, ref_field: str):
    if t.data_type != ref.data_type:
        c.fail(f"{field}.data_type", t.data_type.name,
               f"expected {ref.data_type.name}, the data type of {ref_field}")


def check_same_rank(c: Checker, field: str, t: TensorDesc, ref: TensorDesc, ref_field: str):
    if t.rank != ref.rank:
        c.fail(f"{field}.sizes", t.sizes,
               f"expected {ref.rank} dimensions, the dimension count of {ref_field}")


def check_same_tensor(c: Checker, field: str, t: TensorDesc, ref: TensorDesc, ref_field: str):
    """``t`` has ``ref``'s sizes and data type (a tensor one operator of a fused pair reads
    where the other writes it)."""
    if t.sizes != ref.sizes:
        c.fail(f"{field}.sizes", t.sizes, f"expected {ref.sizes}, the sizes of {ref_field}")
    if t.data_type != ref.data_type:
        c.fail(f"{field}.data_type", t.data_type.name,
               f"expected {ref.data_type.name}, the data type of {ref_field}")


def check_unary_tensors(c: Checker, desc, types, lo_rank: int, hi_rank: int, note: str = ""):
    """Input and output tensors of a one-input operator: present, rank in range, the input's
    type allowed, the output of the same type and rank. Returns (input, output)."""
    inp = check_tensor(c, "input_tensor", desc.input_tensor)
    out = check_tensor(c, "output_tensor", desc.output_tensor)
    check_rank(c, "input_tensor", inp, lo_rank, hi_rank)
    check_type(c, "input_tensor", inp, types, note)
    check_same_type(c, "output_tensor", out, inp, "input_tensor")
    check_same_rank(c, "output_tensor", out, inp, "input_tensor")
    return inp, out


def check_output_sizes(c: Checker, field: str, t: TensorDesc, expected, why: str):
    expected = tuple(expected)
    if t.sizes != expected:
        c.fail(f"{field}.sizes", t.sizes, f"expected {expected} ({why})")


# -- data movement as per-axis index maps (pure data; the backends emit loops from it) ---------

#: AxisMap kinds that pad: 'shift' (constant outside), 'clamp', 'reflect', 'symmetric', 'wrap'
PAD_KINDS = ("shift", "clamp", "reflect", "symmetric", "wrap")

#: what a windowed operator's ``input_padding`` option takes (a padding operator in front,
#: folded into the kernel's input reads; graphs): PaddingMode names -> the AxisMap kinds that
#: read through them
FOLDS = {"EDGE": "clamp", "REFLECTION": "reflect", "SYMMETRIC": "symmetric", "WRAP": "wrap"}


@dataclass(frozen=True)
class Fold:
    """A kernel's plan where a padding operator in front is folded into its input reads: the
    AxisMap kind the padded coordinates read through (in the kernel key; its label in the
    generated module's title)."""

    kind: str

    @property
    def label(self) -> str:
        return f"fold {self.kind}"


@dataclass(frozen=True)
class AxisMap:
    """Output coordinate ``o`` of one axis reads input coordinate ``i`` of an axis of ``n``:

    * 'shift': ``i = o - a``; outside ``[0, n)`` is the padding constant;
    * 'clamp', 'reflect', 'symmetric', 'wrap': padding by ``a`` in front, folded as named;
    * 'modulo': ``i = o mod n`` (repetition);
    * 'affine': ``i = a + s * o``.

    ``size`` is the output axis length.
    """

    kind: str
    n: int
    size: int
    a: int = 0
    s: int = 1

    def sources(self, lo: int, hi: int):
        """The same maps evaluated with NumPy, for host-side users (the Dask layer): the input
        coordinates read by output coordinates ``[lo, hi)`` of one axis, and a mask of those that
        read the input (False: the padding constant). Tested against the generated source's
        (``_gather.emit_map``)."""
        return self.at(np.arange(lo, hi, dtype=np.int64))

    def at(self, o):
        """:meth:`sources` at any array of output coordinates ``o``."""
        o = np.asarray(o, dtype=np.int64)
        n, a = self.n, self.a
        inside = np.ones(o.shape, bool)
        if self.kind == "shift":
            i = o - a
            inside = (i >= 0) & (i < n)
        elif self.kind == "clamp":
            i = np.clip(o - a, 0, n - 1)
        elif self.kind == "reflect":
            if n == 1:
                i = np.zeros_like(o)
            else:
                p = 2 * (n - 1)
                j = np.mod(o - a, p)
                i = np.where(j < n, j, p - j)
        elif self.kind == "symmetric":
            p = 2 * n
            j = np.mod(o - a, p)
            i = np.where(j < n, j, p - 1 - j)
        elif self.kind == "wrap":
            i = np.mod(o - a, n)
        elif self.kind == "modulo":
            i = np.mod(o, n)
        elif self.kind == "affine":
            i = a + self.s * o
        else:
            raise AssertionError(f"unknown AxisMap kind {self.kind!r}")
        return np.where(inside, i, 0), inside


@dataclass(frozen=True)
class GatherPlan:
    """A data-movement operator: one AxisMap per dimension, and the constant read outside
    'shift' axes (CONSTANT padding), else None."""

    maps: tuple[AxisMap, ...]
    constant: object = None


def index_runs(src, level=None) -> list[tuple]:
    """Positions ``0..len(src)-1`` of an output axis as maximal runs: ``("copy", j, n, s,
    step)`` where position ``j + t`` reads input ``s + step * t`` for ``t < n``, and ``("fill",
    j, n, level)`` where ``level[j]`` (>= 0) names a padding's constant (``level`` None or -1:
    every position reads ``src``). What generated code lays a row out as, once."""
    out, j, n = [], 0, len(src)
    level = level if level is not None else [-1] * n
    while j < n:
        k = j + 1
        if level[j] >= 0:
            while k < n and level[k] == level[j]:
                k += 1
            out.append(("fill", j, k - j, level[j]))
        else:
            step = src[k] - src[j] if k < n and level[k] < 0 else 1
            while k < n and level[k] < 0 and src[k] - src[k - 1] == step:
                k += 1
            out.append(("copy", j, k - j, src[j], step))
        j = k
    return out
