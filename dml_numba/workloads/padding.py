"""Padding workloads: reflection on an image, constant and symmetric on an activation."""
from __future__ import annotations

import numpy as np

from ..ops.padding import Padding1OperatorDesc, PaddingMode
from . import data, ort_call, sizes, tensor, torch_call, workload

_NUMPY_MODE = {PaddingMode.CONSTANT: "constant", PaddingMode.EDGE: "edge",
               PaddingMode.REFLECTION: "reflect", PaddingMode.SYMMETRIC: "symmetric",
               PaddingMode.WRAP: "wrap"}


def spec(shape, start, end, mode):
    """(make, peers) for padding ``shape`` by ``start``/``end`` in ``mode`` (constant value 1)."""
    def make(dtype, rng):
        out = tuple(n + a + b for n, a, b in zip(shape, start, end))
        t = tensor(dtype, shape).data_type
        desc = Padding1OperatorDesc(tensor(dtype, shape), tensor(dtype, out), mode, t,
                                    1.0 if t.is_float else 1, start, end)
        return desc, [data(shape, dtype, np.random.default_rng(0))]

    np_mode = _NUMPY_MODE[mode]
    peers = {"numpy.pad": lambda d, xs: (lambda: np.pad(xs[0], list(zip(start, end)), np_mode,
                                                        **({"constant_values": 1}
                                                           if np_mode == "constant" else {})))}
    torch_mode = {"constant": "constant", "edge": "replicate", "reflect": "reflect",
                  "wrap": "circular"}.get(np_mode)
    if torch_mode and len(shape) == 4 and start[:2] == end[:2] == (0, 0):
        pads = (start[3], end[3], start[2], end[2])
        peers["torch"] = lambda d, xs: torch_call(
            lambda torch, tx: torch.nn.functional.pad(tx, pads, mode=torch_mode,
                                                      **({"value": 1.0}
                                                         if torch_mode == "constant" else {})),
            xs)
    ort_mode = {"constant": "constant", "edge": "edge", "reflect": "reflect",
                "wrap": "wrap"}.get(np_mode)
    if ort_mode:
        peers["onnxruntime"] = lambda d, xs: ort_call(
            "Pad", xs, extra_inputs=[np.array(list(start) + list(end), np.int64)], mode=ort_mode)
    return make, peers


def workloads(quick: bool):
    s = sizes(quick)
    img, act = s["image"], s["activation"]
    return [
        workload("padding", f"reflection pad 16 on image {img}",
                 spec(img, (0, 0, 16, 16), (0, 0, 16, 16), PaddingMode.REFLECTION), "bytes"),
        workload("padding", f"constant pad 3 on {act}",
                 spec(act, (0, 0, 3, 3), (0, 0, 3, 3), PaddingMode.CONSTANT), "bytes"),
        workload("padding", f"symmetric pad 8 on {act}",
                 spec(act, (0, 0, 8, 8), (0, 0, 8, 8), PaddingMode.SYMMETRIC), "bytes"),
    ]


def demo(rng):
    x = rng.standard_normal((2, 8, 64, 64)).astype(np.float32)
    t = tensor(np.float32, x.shape)
    refl = Padding1OperatorDesc(t, tensor(np.float32, (2, 8, 78, 74)), PaddingMode.REFLECTION,
                                t.data_type, 0.0, (0, 0, 5, 7), (0, 0, 9, 3))
    const = Padding1OperatorDesc(t, tensor(np.float32, (3, 9, 69, 69)), PaddingMode.CONSTANT,
                                 t.data_type, 1.5, (0, 1, 2, 3), (1, 0, 3, 2))
    return [("padding reflection", refl, [x]), ("padding constant", const, [x])]
