"""One mapping per ONNX operator onto DirectML's descriptors (methods of the loader: each reads
its node's attributes and inputs, and adds a graph node, fuses into the node before it, or makes
its output a view)."""
from __future__ import annotations

from dataclasses import replace
from math import prod

import numpy as np

from .. import functional as F
from .._dims import pooled_size, pooled_size_ceil
from .._dtypes import DataType
from .._errors import ValidationError
from ..ops import activation as act
from ..ops.average_pooling import AveragePooling1OperatorDesc
from ..ops.convolution import ConvolutionDirection
from ..ops.max_pooling import MaxPooling2OperatorDesc
from ..ops.padding import PaddingMode
from ..tensor import TensorDesc

PAD_MODES = {"constant": PaddingMode.CONSTANT, "reflect": PaddingMode.REFLECTION,
             "edge": PaddingMode.EDGE, "wrap": PaddingMode.WRAP}

#: ONNX activation -> (DirectML activation, its fields from the node's attributes and defaults)
ACTIVATIONS = {
    "Relu": lambda a: act.ActivationReluOperatorDesc(),
    "LeakyRelu": lambda a: act.ActivationLeakyReluOperatorDesc(a.get("alpha", 0.01)),
    "Sigmoid": lambda a: act.ActivationSigmoidOperatorDesc(),
    "HardSigmoid": lambda a: act.ActivationHardSigmoidOperatorDesc(a.get("alpha", 0.2),
                                                                   a.get("beta", 0.5)),
    "Tanh": lambda a: act.ActivationTanhOperatorDesc(),
    "Elu": lambda a: act.ActivationEluOperatorDesc(a.get("alpha", 1.0)),
    "Celu": lambda a: act.ActivationCeluOperatorDesc(a.get("alpha", 1.0)),
    "Selu": lambda a: act.ActivationScaledEluOperatorDesc(
        a.get("alpha", 1.67326319217681884765625), a.get("gamma", 1.05070102214813232421875)),
    "Softplus": lambda a: act.ActivationSoftplusOperatorDesc(1.0),
    "Softsign": lambda a: act.ActivationSoftsignOperatorDesc(),
    "ThresholdedRelu": lambda a: act.ActivationThresholdedReluOperatorDesc(a.get("alpha", 1.0)),
    "Shrink": lambda a: act.ActivationShrinkOperatorDesc(a.get("bias", 0.0), a.get("lambd", 0.5)),
    "Gelu": lambda a: act.ActivationGeluOperatorDesc(),
    "Clip": None,  # min and max are inputs from opset 11: read with the node
}

#: ONNX operator -> the mapping's method
METHODS = {"Identity": "_identity", "Pad": "_pad", "LpPool": "_lppool", "Conv": "_conv",
           "ConvTranspose": "_convtranspose", "Tile": "_tile", "Slice": "_slice",
           "MaxPool": "_maxpool", "AveragePool": "_averagepool",
           "GlobalMaxPool": "_globalpool", "GlobalAveragePool": "_globalpool",
           "Add": "_binary", "Mul": "_binary", "BatchNormalization": "_batchnormalization",
           "Gemm": "_gemm", "MatMul": "_matmul", "Concat": "_concat", "Flatten": "_view",
           "Reshape": "_view", "Squeeze": "_view", "Unsqueeze": "_view", "Constant": None}
METHODS.update({a: "_activation" for a in ACTIVATIONS})

#: the ONNX operators a model may hold (besides nodes whose inputs are all constant)
SUPPORTED = tuple(METHODS)


def named(fail, field, build):
    """The descriptor from ``build()``, its ValidationError re-raised naming the ONNX node."""
    try:
        return build()
    except ValidationError as exc:
        raise ValidationError(f"compile_model: {fail.where}: {exc}") from None


def axes_of(fail, field: str, axes, rank: int) -> list[int]:
    """ONNX's axes as the spec has them: each in [-rank, rank - 1] (negative counts from the
    end), none twice (ONNX Runtime refuses both); normalised to 0..rank-1."""
    out = []
    for ax in axes:
        ax = int(ax)
        if not -rank <= ax < rank:
            fail(field, list(axes), f"expected axes in [{-rank}, {rank - 1}] (the input has "
                                    f"{rank} dimensions)")
        if ax % rank in out:
            fail(field, list(axes), f"expected each axis once (axis {ax % rank} is named twice)")
        out.append(ax % rank)
    return out


class Mappings:
    """The loader's node mappings (the loader itself is :class:`.load.Loader`)."""

    def map_node(self, node, fail, a):
        method = METHODS.get(node.op_type)
        if method is None:  # pragma: no cover - check_supported refused it before
            fail("op_type", node.op_type, f"expected one of {', '.join(SUPPORTED)}")
        getattr(self, method)(node, fail, a)

    # -- aliases and views ------------------------------------------------------------------------
    def _identity(self, node, fail, a):
        src = node.input[0]
        if src in self.consts:
            self.consts[node.output[0]] = self.consts[src]
        else:
            self.tensor(src, fail, "input[0]")
            self.values[node.output[0]] = self.values[src]
            self.shapes[node.output[0]] = self.shapes[src]

    def _view(self, node, fail, a):
        """Flatten, Reshape, Squeeze, Unsqueeze: the same elements with other sizes (a view of
        a node's output; a constant reshaped at load)."""
        src, x = self.tensor(node.input[0], fail, "input[0]")
        shape = list(x.shape)
        op, rank = node.op_type, len(shape)
        if op == "Flatten":
            axis = a.get("axis", 1)
            if not -rank <= axis <= rank:
                fail("axis", axis, f"expected an axis in [{-rank}, {rank}]")
            axis = axis + rank if axis < 0 else axis
            new = [prod(shape[:axis]), prod(shape[axis:])]
        elif op == "Reshape":
            want = self.ints(self.input_name(node, 1), fail, "shape")
            new = [shape[i] if v == 0 and not a.get("allowzero", 0) else v
                   for i, v in enumerate(want)]
            if new.count(-1) > 1:
                fail("shape", want, "expected at most one -1")
            if -1 in new:
                rest = prod(v for v in new if v != -1)
                new[new.index(-1)] = prod(shape) // rest if rest else 0
        else:
            axes = a.get("axes") if self.opset < 13 else self.ints(
                self.input_name(node, 1), fail, "axes", optional=True)
            if op == "Squeeze":
                axes = [i for i, n in enumerate(shape) if n == 1] if axes is None else \
                    axes_of(fail, "axes", axes, rank)
                if any(shape[i] != 1 for i in axes):
                    fail("axes", axes, f"expected axes of size 1 (the input is {tuple(shape)})")
                new = [n for i, n in enumerate(shape) if i not in axes]
            else:
                if axes is None:
                    fail("axes", None, "expected the axes to insert")
                axes = axes_of(fail, "axes", axes, rank + len(axes))
                it = iter(shape)
                new = [1 if i in axes else next(it) for i in range(rank + len(axes))]
        if prod(new) != prod(shape) or min(new, default=1) < 1:
            fail("shape", new, f"expected sizes of {prod(shape)} elements in all, each >= 1 "
                               f"(the input is {tuple(shape)})")
        if src[0] == "const":
            self.consts[node.output[0]] = self.consts[src[1]].reshape(new)
            return
        self.values[node.output[0]] = src  # a model input: given to the graph reshaped
        self.shapes[node.output[0]] = type(x)(shape=tuple(new), dtype=x.dtype)

    # -- the data movement and windows we had ---------------------------------------------------
    def _pad(self, node, fail, a):
        src, x = self.tensor(node.input[0], fail, "input[0]")
        rank = len(x.shape)
        if self.opset < 11:
            pads, value = a.get("pads"), a.get("value", 0.0)
            if pads is None:
                fail("pads", None, "expected the pads attribute")
        else:
            pads = self.ints(self.input_name(node, 1), fail, "pads")
            v = self.const(self.input_name(node, 2), fail, "constant_value", optional=True)
            value = 0 if v is None else np.asarray(v).reshape(-1)[0].item()
        axes = self.ints(self.input_name(node, 3), fail, "axes", optional=True)
        mode = a.get("mode", "constant")
        if mode not in PAD_MODES:
            fail("mode", mode, f"expected one of {', '.join(PAD_MODES)}")
        axes = list(range(rank)) if axes is None else axes_of(fail, "axes", axes, rank)
        if len(pads) != 2 * len(axes):
            fail("pads", pads, f"expected {2 * len(axes)} values (begin and end per axis)")
        start, end = [0] * rank, [0] * rank
        for i, ax in enumerate(axes):
            start[ax], end[ax] = pads[i], pads[i + len(axes)]
        if min(start + end) < 0:
            fail("pads", pads, "expected pads >= 0 (cropping is a Slice)")
        self.add(named(fail, "pads", lambda: F.padding_desc(x, start, end, PAD_MODES[mode],
                                                            value)),
                 [src], node.name, node.output[0])

    def _window(self, a, fail, nd):
        """strides, dilations, (start, end) pads of a window operator, auto_pad resolved later."""
        pads = a.get("pads", [0] * 2 * nd)
        if len(pads) != 2 * nd:
            fail("pads", pads, f"expected {2 * nd} values")
        return (list(a.get("strides", [1] * nd)), list(a.get("dilations", [1] * nd)),
                list(pads[:nd]), list(pads[nd:]))

    def _auto_pad(self, a, fail, in_sizes, kernel, strides, dilations, start, end):
        mode = a.get("auto_pad", "NOTSET")
        if mode in ("NOTSET", "VALID"):
            return (start, end) if mode == "NOTSET" else ([0] * len(start), [0] * len(end))
        if mode not in ("SAME_UPPER", "SAME_LOWER"):
            fail("auto_pad", mode, "expected NOTSET, VALID, SAME_UPPER or SAME_LOWER")
        start, end = [], []
        for n, k, s, d in zip(in_sizes, kernel, strides, dilations):
            out = -(-n // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
            small, big = total // 2, total - total // 2
            start.append(small if mode == "SAME_UPPER" else big)
            end.append(big if mode == "SAME_UPPER" else small)
        return start, end

    def _lppool(self, node, fail, a):
        src, x = self.tensor(node.input[0], fail, "input[0]")
        nd = len(x.shape) - 2
        if a.get("ceil_mode", 0):
            fail("ceil_mode", a["ceil_mode"], "expected 0 (DirectML's LP pooling floors)")
        if "kernel_shape" not in a:
            fail("kernel_shape", None, "expected the window size")
        strides, dil, start, end = self._window(a, fail, nd)
        start, end = self._auto_pad(a, fail, x.shape[2:], a["kernel_shape"], strides, dil, start,
                                    end)
        self.add(named(fail, "kernel_shape", lambda: F.lp_pooling_desc(
            x, a["kernel_shape"], strides, start, end, dil, a.get("p", 2))),
            [src], node.name, node.output[0])

    def _pooling(self, node, fail, a, kind):
        """MaxPool and AveragePool: the window, auto_pad, and ceil_mode as ONNX Runtime has it
        (the ceil size, less one where the last window would start past the start padding and
        the input)."""
        src, x = self.tensor(node.input[0], fail, "input[0]")
        nd = len(x.shape) - 2
        if "kernel_shape" not in a:
            fail("kernel_shape", None, "expected the window size")
        k = list(a["kernel_shape"])
        if len(k) != nd:
            fail("kernel_shape", k, f"expected {nd} values (one per spatial axis)")
        strides, dil, start, end = self._window(a, fail, nd)
        start, end = self._auto_pad(a, fail, x.shape[2:], k, strides, dil, start, end)
        out = []
        for i, n in enumerate(x.shape[2:]):
            size = pooled_size(n, start[i], end[i], k[i], strides[i], dil[i])
            if a.get("ceil_mode", 0):
                size = pooled_size_ceil(n, start[i], end[i], k[i], strides[i], dil[i])
                if (size - 1) * strides[i] >= n + start[i]:
                    size -= 1
            out.append(size)

        named_indices = len(node.output) > 1 and bool(node.output[1])
        indices = named_indices and node.output[1] in self.outputs

        def build():
            inp = TensorDesc.like(x)
            outp = TensorDesc(inp.data_type, tuple(x.shape[:2]) + tuple(out))
            if kind == "max":  # ONNX's int64 indices: DirectML's UINT64, the same bits
                at = TensorDesc(DataType.UINT64, outp.sizes) if indices else None
                return MaxPooling2OperatorDesc(inp, outp, at, strides, k, start, end, dil)
            return AveragePooling1OperatorDesc(inp, outp, strides, k, start, end, dil,
                                               bool(a.get("count_include_pad", 0)))

        self.add(named(fail, "kernel_shape", build), [src], node.name, node.output[0])
        if named_indices:  # (computed where it is a model output; no node may read it)
            self.indices[node.output[1]] = len(self.nodes) - 1

    def _maxpool(self, node, fail, a):
        """MaxPool; its Indices output (row-major flat indices, storage_order 0: DirectML's)
        as a model output."""
        if len(node.output) > 1 and node.output[1] and a.get("storage_order", 0) != 0:
            fail("storage_order", a["storage_order"], "expected 0 (row-major indices, as "
                                                      "DirectML numbers them)")
        self._pooling(node, fail, a, "max")

    def _averagepool(self, node, fail, a):
        self._pooling(node, fail, a, "average")

    def _globalpool(self, node, fail, a):
        _, x = self.tensor(node.input[0], fail, "input[0]")
        a = {"kernel_shape": list(x.shape[2:]), "count_include_pad": 0}
        self._pooling(node, fail, a, "max" if node.op_type == "GlobalMaxPool" else "average")

    def _conv(self, node, fail, a, direction=ConvolutionDirection.FORWARD):
        src, x = self.tensor(node.input[0], fail, "input[0]")
        wsrc, w = self.tensor(node.input[1], fail, "input[1]")
        bias = self.input_name(node, 2) or None
        nd = len(x.shape) - 2
        strides, dil, start, end = self._window(a, fail, nd)
        kernel = a.get("kernel_shape", list(w.shape[2:]))
        outpad = list(a.get("output_padding", [0] * nd))
        mode = a.get("auto_pad", "NOTSET")
        if direction == ConvolutionDirection.BACKWARD and ("output_shape" in a
                                                         or mode.startswith("SAME")):
            # ONNX's rule: the output size asked for (or input * stride for SAME) fixes the
            # total padding; what it cannot take from the end is output padding
            out = list(a["output_shape"])[-nd:] if "output_shape" in a else \
                [n * st for n, st in zip(x.shape[2:], strides)]
            start, end = [], []
            for i, (n, k, st, d) in enumerate(zip(x.shape[2:], kernel, strides, dil)):
                total = st * (n - 1) + outpad[i] + (k - 1) * d + 1 - out[i]
                if total < 0:
                    outpad[i], total = outpad[i] - total, 0
                upper = mode == "SAME_UPPER"
                start.append(total // 2 if upper else total - total // 2)
                end.append(total - start[-1])
        else:
            start, end = self._auto_pad(a, fail, x.shape[2:], kernel, strides, dil, start, end)
        sources = [src, wsrc]
        b = None
        if bias is not None:
            bsrc, b = self.tensor(bias, fail, "input[2]")
            if bsrc[0] == "const":
                self.consts[bias] = self.consts[bias].reshape(F.bias_sizes(b.shape, nd + 2))
            elif len(b.shape) == 1:
                fail("input[2]", bias, "expected a constant bias (a (C_out,) tensor computed by "
                                       "the graph is not bound as (1, C_out, 1...))")
            sources.append(bsrc)
        self.add(named(fail, "attributes", lambda: F.convolution_desc(
            x, w, b, strides, dil, start, end, outpad, a.get("group", 1), direction=direction)),
            sources, node.name, node.output[0])

    def _convtranspose(self, node, fail, a):
        self._conv(node, fail, a, ConvolutionDirection.BACKWARD)

    def _tile(self, node, fail, a):
        src, x = self.tensor(node.input[0], fail, "input[0]")
        reps = self.ints(self.input_name(node, 1), fail, "repeats")
        self.add(named(fail, "repeats", lambda: F.tile_desc(x, reps)), [src], node.name,
                 node.output[0])

    def _slice(self, node, fail, a):
        src, x = self.tensor(node.input[0], fail, "input[0]")
        rank = len(x.shape)
        if self.opset < 10:
            starts, ends, axes, steps = a.get("starts"), a.get("ends"), a.get("axes"), None
        else:
            get = lambda i, f, opt: self.ints(self.input_name(node, i), fail, f, opt)  # noqa: E731
            starts, ends = get(1, "starts", False), get(2, "ends", False)
            axes, steps = get(3, "axes", True), get(4, "steps", True)
        axes = list(range(len(starts))) if axes is None else axes_of(fail, "axes", axes, rank)
        steps = [1] * len(starts) if steps is None else steps
        offsets, sizes, strides = [0] * rank, list(x.shape), [1] * rank
        for ax, s, e, st in zip(axes, starts, ends, steps):
            if st == 0:
                fail("steps", steps, "expected non-zero steps")
            lo, hi, step = slice(s, e, st).indices(x.shape[ax])
            count = len(range(lo, hi, step))
            if count == 0:
                fail("starts", starts, f"expected a non-empty slice of axis {ax} (DirectML's "
                                       "tensors have no empty dimensions)")
            last = lo + (count - 1) * step
            offsets[ax], sizes[ax] = min(lo, last), abs(last - lo) + 1
            strides[ax] = step
        self.add(named(fail, "starts", lambda: F.slice1_desc(x, offsets, sizes, strides)),
                 [src], node.name, node.output[0])

    # -- element-wise, normalization, matrices, joins ---------------------------------------------
    def _operand(self, name, fail, field, shape):
        """A binary operation's operand of ``shape``: a tensor of that shape, or a constant
        broadcast to it at load (NumPy's rule, which ONNX's is)."""
        src, t = self.tensor(name, fail, field)
        if tuple(t.shape) == tuple(shape):
            return src, t
        if src[0] == "input" and _broadcasts(t.shape, shape):
            return self.input_as(src, t, "broadcast", shape, fail, field, name)
        if src[0] != "const":
            fail(field, name, f"expected the shape {tuple(shape)} of the other operand (a "
                              f"tensor computed by the graph of shape {tuple(t.shape)} is not "
                              "broadcast) or a constant")
        try:
            value = np.broadcast_to(self.consts[src[1]], shape)
        except ValueError:
            fail(field, name, f"expected a constant that broadcasts to {tuple(shape)}")
        return self.tensor(self.constant_name(name, value), fail, field)

    def _binary(self, node, fail, a):
        """Add and Mul: DirectML's ADD1 (whose activation a Relu after it fuses) and MULTIPLY;
        the operand that is not a constant sets the shape."""
        names = list(node.input[:2])
        refs = [self.tensor(n, fail, f"input[{i}]") for i, n in enumerate(names)]
        first = next((i for i, (s, _) in enumerate(refs) if s[0] != "const"), 0)
        shape = np.broadcast_shapes(*(tuple(t.shape) for _, t in refs)) if all(
            s[0] == "const" for s, _ in refs) else tuple(refs[first][1].shape)
        ops = [self._operand(n, fail, f"input[{i}]", shape) for i, n in enumerate(names)]
        make = F.element_wise_add_desc if node.op_type == "Add" else \
            F.element_wise_multiply_desc
        self.add(named(fail, "inputs", lambda: make(ops[0][1], ops[1][1])),
                 [ops[0][0], ops[1][0]], node.name, node.output[0])

    def _batchnormalization(self, node, fail, a):
        """Folded into the convolution before it (its filter and bias, per output channel, as
        ONNX Runtime does) where that convolution's output is read by this node alone and its
        filter and bias are constants; else DirectML's BATCH_NORMALIZATION."""
        if a.get("training_mode", 0):
            fail("training_mode", a["training_mode"], "expected 0 (inference)")
        src, x = self.tensor(node.input[0], fail, "input[0]")
        nd = len(x.shape)
        params = [self.const(self.input_name(node, i), fail, f)
                  for i, f in ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var"))]
        scale, bias, mean, var = (np.asarray(p, np.float64).reshape(-1) for p in params)
        eps = float(a.get("epsilon", 1e-5))
        if self._fold_into_convolution(node, src, scale, bias, mean, var, eps):
            return
        shaped = [self.tensor(self.constant_name(n, np.asarray(p).reshape(
            F.bias_sizes(np.shape(p), nd))), fail, f)
            for n, p, f in zip(node.input[1:5], params, ("scale", "B", "mean", "var"))]
        (ssrc, s), (bsrc, b), (msrc, m), (vsrc, v) = shaped
        self.add(named(fail, "inputs", lambda: F.batch_normalization_desc(x, m, v, s, b, eps)),
                 [src, msrc, vsrc, ssrc, bsrc], node.name, node.output[0])

    def _fold_into_convolution(self, node, src, scale, bias, mean, var, eps) -> bool:
        key = self.root.get(node.input[0], node.input[0])
        if src[0] != "node" or self.readers.get(key, 0) != 1 or key in self.outputs:
            return False
        conv, sources, name = self.nodes[src[1]]
        if not hasattr(conv, "filter_tensor") or conv.fused_activation is not None or \
                any(s[0] != "const" for s in sources[1:]):
            return False
        factor = scale / np.sqrt(var + eps)
        w = self.consts[sources[1][1]].astype(np.float64)
        cout = conv.output.sizes[1]
        b = self.consts[sources[2][1]].astype(np.float64).reshape(-1) if len(sources) > 2 \
            else np.zeros(cout)
        if conv.direction == ConvolutionDirection.FORWARD:
            w = w * factor.reshape((-1,) + (1,) * (w.ndim - 1))
        else:  # {C_in, C_out / G, k...}: output channel g * C_out/G + j is column j of group g
            g = conv.group_count
            per = w.shape[1]
            f = factor.reshape(g, per)
            w = (w.reshape((g, -1) + w.shape[1:]) *
                 f.reshape((g, 1, per) + (1,) * (w.ndim - 2))).reshape(w.shape)
        b = (b - mean) * factor + bias
        dtype = conv.output.dtype
        wname = self.constant_name(sources[1][1], w.astype(dtype))
        bname = self.constant_name(f"{sources[1][1]}.bias", b.astype(dtype).reshape(
            F.bias_sizes((cout,), len(conv.output.sizes))))
        bdesc = TensorDesc(conv.output.data_type, self.consts[bname].shape)
        self.nodes[src[1]] = [replace(conv, bias_tensor=bdesc),
                              [sources[0], ("const", wname), ("const", bname)], name]
        self.values[node.output[0]] = src
        self.shapes[node.output[0]] = self.shapes[node.input[0]]
        return True

    def _gemm(self, node, fail, a):
        asrc, at = self.tensor(node.input[0], fail, "input[0]")
        bsrc, bt = self.tensor(node.input[1], fail, "input[1]")
        ta, tb = a.get("transA", 0), a.get("transB", 0)
        alpha = a.get("alpha", 1.0)
        beta = a.get("beta", 1.0)
        if len(at.shape) != len(bt.shape):
            fail("input[1]", node.input[1], f"expected {len(at.shape)} dimensions, as input[0]")
        desc = named(fail, "inputs", lambda: F.gemm_desc(at, bt, None, ta, tb, alpha, beta))
        sources, ct = [asrc, bsrc], None
        cname = self.input_name(node, 2)
        if cname and beta != 0.0:
            csrc, ct = self._operand(cname, fail, "input[2]", desc.output.sizes)
            sources.append(csrc)
        self.add(named(fail, "inputs", lambda: F.gemm_desc(at, bt, ct, ta, tb, alpha, beta)),
                 sources, node.name, node.output[0])

    def _matmul(self, node, fail, a):
        _, at = self.tensor(node.input[0], fail, "input[0]")
        bsrc, bt = self.tensor(node.input[1], fail, "input[1]")
        if len(bt.shape) < len(at.shape) and bsrc[0] == "const" and len(bt.shape) >= 2:
            value = np.broadcast_to(self.consts[bsrc[1]], tuple(at.shape[:-2]) +
                                    tuple(bt.shape[-2:]))
            copy = self.onnx.NodeProto()
            copy.CopyFrom(node)
            copy.input[1] = self.constant_name(node.input[1], value)
            node = copy
        self._gemm(node, fail, {})

    def _concat(self, node, fail, a):
        refs = [self.tensor(n, fail, f"input[{i}]") for i, n in enumerate(node.input)]
        if "axis" not in a:
            fail("axis", None, "expected the axis")
        rank = len(refs[0][1].shape)
        axis = axes_of(fail, "axis", [a["axis"]], rank)[0]
        self.add(named(fail, "inputs", lambda: F.join_desc([t for _, t in refs], axis)),
                 [s for s, _ in refs], node.name, node.output[0])

    # -- activations: fused into the node before them ---------------------------------------------
    def _activation(self, node, fail, a):
        src = node.input[0]
        _, xt = self.tensor(src, fail, "input[0]")
        ref = self.values.get(src)
        prev = self.nodes[ref[1]][0] if ref and ref[0] == "node" else None
        key = self.root.get(src, src)
        fuses = not (prev is None or not hasattr(prev, "fused_activation") or
                     prev.fused_activation or self.readers.get(key, 0) != 1 or
                     key in self.outputs or not prev.output.data_type.is_float)
        if node.op_type == "Clip":
            lo, hi = self._clip_bounds(node, fail, a, xt.dtype)
            desc = named(fail, "min", lambda: act.ElementWiseClipOperatorDesc(lo, hi))
        elif node.op_type == "Gelu" and a.get("approximate", "none") != "none":
            fail("approximate", a["approximate"], "expected 'none' (DirectML's GELU is exact)")
        else:
            desc = ACTIVATIONS[node.op_type](a)
        if fuses:
            self.nodes[ref[1]][0] = replace(prev, fused_activation=desc)
            self.values[node.output[0]] = ref
            self.shapes[node.output[0]] = self.shapes[src]
            return
        self._standalone(node, fail, desc)

    def _standalone(self, node, fail, activation):
        """An activation with nothing to fuse into (after a pooling, a join, a model input, or
        an output seen elsewhere): DirectML's activation operator of its own."""
        src, x = self.tensor(node.input[0], fail, "input[0]")
        allowed = [t.numpy for t in activation.data_types]
        if np.dtype(x.dtype) not in allowed:
            fail("input[0]", node.input[0], f"expected a tensor of "
                                            f"{', '.join(t.name for t in allowed)} (DirectML's "
                                            f"{node.op_type} takes no {np.dtype(x.dtype).name})")
        self.add(named(fail, "input[0]", lambda: F.activation_desc(x, activation)),
                 [src], node.name, node.output[0])

    def _clip_bounds(self, node, fail, a, dtype):
        if not np.issubdtype(np.dtype(dtype), np.floating):
            fail("input[0]", node.input[0], f"expected a floating-point tensor (DirectML's "
                                            f"fused clip takes no {np.dtype(dtype).name})")
        big = float(np.finfo(dtype).max)
        if self.opset < 11:
            return a.get("min", -big), a.get("max", big)
        vals = []
        for i, field, default in ((1, "min", -big), (2, "max", big)):
            v = self.const(self.input_name(node, i), fail, field, optional=True)
            vals.append(default if v is None else float(np.asarray(v).reshape(-1)[0]))
        return tuple(vals)


def _broadcasts(shape, to) -> bool:
    try:
        return tuple(np.broadcast_shapes(tuple(shape), tuple(to))) == tuple(to)
    except ValueError:
        return False
