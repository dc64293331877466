"""An operator whose result gets a tensor added before its fused activation: not a DirectML
struct, but what DirectML's graph compiler makes of a convolution whose result an element-wise
addition (ADD1) alone reads (a residual connection), and what
:func:`dml_numba.graph.compile_graph` compiles such a pair to (the graph's residual rule).

``Y = act(op(inputs) + addend)``: ``operator`` carries the activation (the addition's) in its
``fused_activation`` slot, applied after the sum. Each output element is the operator's value
rounded to the output's type, plus the addend's element, rounded again: the two nodes one by
one give the same bits (float32; float16 rounds the sum once in float32, as ADD1 does).
"""
from __future__ import annotations

__all__ = ["FusedAddDesc"]

from dataclasses import dataclass, replace

from ..tensor import TensorDesc
from ._base import OperatorDesc, check_same_tensor, check_tensor


@dataclass(frozen=True)
class FusedAddDesc(OperatorDesc):
    """``operator``: a descriptor that takes an addend (its class's ``takes_addend`` trait: a
    convolution), its ``fused_activation`` the one applied after the sum; ``addend_tensor``:
    the output's sizes and type. The inputs are the operator's, then the addend.

    >>> import numpy as np
    >>> from dml_numba import functional as F
    >>> conv = F.convolution_desc(np.zeros((1, 2, 4, 4), np.float32),
    ...                           np.zeros((3, 2, 1, 1), np.float32))
    >>> FusedAddDesc(conv, TensorDesc(1, (1, 3, 4, 4))).output.sizes
    (1, 3, 4, 4)
    """

    operator: OperatorDesc
    addend_tensor: TensorDesc

    exact = False  # the operator's own arithmetic, within its tolerance

    def _validate(self, c):
        op = self.operator
        if not (isinstance(op, OperatorDesc) and getattr(op, "takes_addend", False)):
            c.fail("operator", type(op).__name__, "expected a descriptor that takes an addend "
                                                  "(a convolution)")
        add = check_tensor(c, "addend_tensor", self.addend_tensor)
        check_same_tensor(c, "addend_tensor", add, op.output, "operator.output_tensor")

    # -- the operator's tensors, then the addend -------------------------------------------
    @property
    def input_fields(self) -> tuple:
        return tuple(self.operator.input_fields) + ("addend_tensor",)

    def __getattr__(self, name):
        """The operator's input tensors by their own fields' names (``input_tensor``,
        ``filter_tensor``, ...: what :attr:`input_fields` names, as graphs read a node's
        inputs)."""
        op = self.__dict__.get("operator")
        if op is not None and name in op.input_fields:
            return getattr(op, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def output_tensor(self) -> TensorDesc:
        return self.operator.output

    def bare(self) -> OperatorDesc:
        """The operator without its activation: what it computes before the addend."""
        return replace(self.operator, fused_activation=None)

    def addition(self):
        """The addition the operator's result takes (ADD1 of packed tensors of the output's
        sizes, the operator's activation its own)."""
        from .element_wise import ElementWiseAdd1OperatorDesc

        t = TensorDesc(self.output_tensor.data_type, self.output_tensor.sizes)
        return ElementWiseAdd1OperatorDesc(t, t, t, self.operator.fused_activation)

    # -- the window trait: the operator's (each output element also reads the addend's at
    # -- its own coordinates)
    def window(self):
        return self.operator.window()

    def rewindow(self, input_tensor, output_tensor, strides, start_padding, end_padding):
        op = self.operator.rewindow(input_tensor, output_tensor, strides, start_padding,
                                    end_padding)
        if op is None or op.output.sizes != self.addend_tensor.sizes:
            return None
        return FusedAddDesc(op, self.addend_tensor)

    def flops(self) -> int:
        return self.operator.flops() + self.output_tensor.element_count

    def canonical(self):
        op = self.operator.canonical()
        return self if op == self.operator else FusedAddDesc(op, self.addend_tensor)

    def replace_tensors(self, **tensors):
        addend = tensors.pop("addend_tensor", self.addend_tensor)
        return FusedAddDesc(self.operator.replace_tensors(**tensors) if tensors
                            else self.operator, addend)
