"""What the loader recognises before it maps nodes one by one: PyTorch's export of LPPool2d (a
subgraph of seven nodes) as one LpPool node, and every operator of a model it cannot run, named
at once."""
from __future__ import annotations

import numpy as np

from .._errors import ValidationError


def readers(nodes) -> dict:
    """value name -> the indices of the nodes reading it."""
    out: dict = {}
    for j, node in enumerate(nodes):
        for name in node.input:
            if name:
                out.setdefault(name, []).append(j)
    return out


def _scalar(consts, name):
    v = consts.get(name)
    if v is None or np.asarray(v).size != 1:
        return None
    return float(np.asarray(v).reshape(-1)[0])


def lppool_exports(onnx, nodes, consts, outputs):
    """The nodes with each PyTorch LPPool2d export replaced by one ONNX LpPool node.

    PyTorch writes ``LPPool2d(p, k, s)`` as ``Pow(x, p)``, ``AveragePool(k, s)`` (padding
    counted), then ``Sign(a) * Relu(Abs(a))`` (= a), times the window's size, to the power 1/p:
    ``(sum over the window of x**p) ** (1/p)``. DirectML's LP pooling sums ``|x|**p``: the same
    for an even p, which is what is recognised; an odd p is refused (naming the node): PyTorch's
    result is not an LP norm there."""
    by = readers(nodes)
    drop, put = set(), {}

    def only(name, op):
        js = by.get(name, [])
        if len(js) != 1 or name in outputs or nodes[js[0]].op_type != op:
            return None
        return js[0]

    for j, pw in enumerate(nodes):
        if pw.op_type != "Pow" or len(pw.input) != 2:
            continue
        p = _scalar(consts, pw.input[1])
        avg = only(pw.output[0], "AveragePool")
        if p is None or avg is None:
            continue
        a = nodes[avg]
        a_readers = sorted(nodes[r].op_type for r in by.get(a.output[0], []))
        if a_readers != ["Abs", "Sign"] or a.output[0] in outputs:
            continue
        sign = next(r for r in by[a.output[0]] if nodes[r].op_type == "Sign")
        ab = next(r for r in by[a.output[0]] if nodes[r].op_type == "Abs")
        relu = only(nodes[ab].output[0], "Relu")
        mul = only(nodes[relu].output[0], "Mul") if relu is not None else None
        if mul is None or sorted(nodes[mul].input) != sorted([nodes[sign].output[0],
                                                              nodes[relu].output[0]]) or \
                only(nodes[sign].output[0], "Mul") != mul:
            continue
        scale = only(nodes[mul].output[0], "Mul")
        if scale is None:
            continue
        other = [i for i in nodes[scale].input if i != nodes[mul].output[0]]
        attrs = {x.name: onnx.helper.get_attribute_value(x) for x in a.attribute}
        k = attrs.get("kernel_shape", [])
        root = only(nodes[scale].output[0], "Pow")
        if len(other) != 1 or _scalar(consts, other[0]) != float(np.prod(k)) or root is None:
            continue
        r = _scalar(consts, nodes[root].input[1])
        if r is None or not np.isclose(r * p, 1.0):
            continue
        if p != int(p) or int(p) % 2:
            where = f"Pow {pw.name!r} (node {j})" if pw.name else f"Pow (node {j})"
            raise ValidationError(
                f"compile_model: {where}: PyTorch's LPPool2d with p = {p:g} is invalid; expected "
                "an even p (PyTorch sums x**p, DirectML's LP pooling |x|**p: the same only for "
                "an even p)")
        pads = attrs.get("pads")
        extra = {"pads": list(pads)} if pads else {}
        if attrs.get("ceil_mode", 0) or not attrs.get("count_include_pad", 0) and pads \
                and any(pads):
            continue  # a window past the input: counted otherwise than LP pooling counts it
        lp = onnx.helper.make_node(
            "LpPool", [pw.input[0]], [nodes[root].output[0]], name=a.name or pw.name,
            kernel_shape=list(k), strides=list(attrs.get("strides", [1] * len(k))), p=int(p),
            **extra)
        drop |= {j, avg, sign, ab, relu, mul, scale, root}
        put[root] = lp
    return [put.get(j, n) for j, n in enumerate(nodes) if j not in drop or j in put]


def check_supported(nodes, consts, model, supported) -> None:
    """Refuse a model with operators the loader cannot run, naming every one of them (and each
    node that uses it), the model's opset and its producer. A node whose inputs are all constant
    is evaluated at load (any operator ONNX's reference evaluator knows), and ``Shape`` reads
    static sizes: neither counts."""
    known = set(consts)
    missing: dict = {}
    for k, node in enumerate(nodes):
        ins = [i for i in node.input if i]
        if node.op_type in ("Constant", "Shape", "Size") or (ins and all(i in known
                                                                           for i in ins)):
            known.update(node.output)
            continue
        if node.op_type not in supported or node.domain not in ("", "ai.onnx"):
            label = f"{node.name!r} (node {k})" if node.name else f"(node {k})"
            op = node.op_type if node.domain in ("", "ai.onnx") else \
                f"{node.domain}.{node.op_type}"
            missing.setdefault(op, []).append(label)
    if missing:
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        who = " ".join(p for p in (model.producer_name, model.producer_version) if p) or \
            "an unnamed exporter"
        listed = "; ".join(f"{op} at {', '.join(where[:3])}" +
                           (f" and {len(where) - 3} more" if len(where) > 3 else "")
                           for op, where in missing.items())
        raise ValidationError(
            f"compile_model: the model (opset {opset}, exported by {who}) has operators "
            f"dml_numba cannot run: {listed}; expected only {', '.join(sorted(supported))} "
            "(and nodes whose inputs are all constant, evaluated at load)")
