"""Activation workloads: each of DirectML's activations as an operator of its own, over a
ResNet-sized feature map, with the PyTorch and ONNX Runtime calls of the same function."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ops.activation import FUSABLE_ACTIVATIONS
from . import data, ort_call, sizes, torch_call, workload

#: activation name -> (PyTorch's call of the same function on tensor ``x`` of module ``t``,
#: ONNX's operator and attributes); those without an equal there have None
PEERS = {
    "relu": (lambda t, x: t.relu(x), ("Relu", {})),
    "sigmoid": (lambda t, x: t.sigmoid(x), ("Sigmoid", {})),
    "tanh": (lambda t, x: t.tanh(x), ("Tanh", {})),
    "leaky_relu": (lambda t, x: t.nn.functional.leaky_relu(x, 0.01), ("LeakyRelu",
                                                                      {"alpha": 0.01})),
    "elu": (lambda t, x: t.nn.functional.elu(x), ("Elu", {})),
    "celu": (lambda t, x: t.nn.functional.celu(x), ("Celu", {})),
    "scaled_elu": (lambda t, x: t.selu(x), ("Selu", {})),
    "softplus": (lambda t, x: t.nn.functional.softplus(x), ("Softplus", {})),
    "softsign": (lambda t, x: t.nn.functional.softsign(x), ("Softsign", {})),
    "gelu": (lambda t, x: t.nn.functional.gelu(x), None),
    "hard_sigmoid": (None, ("HardSigmoid", {})),
    "thresholded_relu": (None, ("ThresholdedRelu", {})),
    "shrink": (None, ("Shrink", {"lambd": 0.5})),
    "identity": (lambda t, x: x.clone(), ("Identity", {})),
}


def _activation(cls):
    """The activation with its defaults, or parameters of its own where it has none."""
    required = {"linear": (2.0, -1.0), "parametric_softplus": (0.5, 2.0), "clip": (0.0, 6.0)}
    return cls(*required.get(cls.activation_name(), ()))


def spec(shape, cls):
    name = cls.activation_name()

    def make(dtype, rng):
        x = data(shape, dtype, rng)
        return F.activation_desc(x, _activation(cls)), [x]

    torch_fn, onnx = PEERS.get(name, (None, None))
    peers = {}
    if name == "clip":
        torch_fn = lambda t, x: t.clamp(x, 0.0, 6.0)  # noqa: E731
        peers["numpy"] = lambda d, a: lambda: np.clip(a[0], 0.0, 6.0)
    if torch_fn is not None:
        peers["torch"] = lambda d, a: torch_call(torch_fn, a)
    if onnx is not None:
        peers["onnxruntime"] = lambda d, a: ort_call(onnx[0], a, **onnx[1])
    return make, peers


def workloads(quick: bool):
    n = sizes(quick)["batch"]
    return [workload("activation", f"{cls.activation_name()} on ({n}, 64, 56, 56)",
                     spec((n, 64, 56, 56), cls), "bytes", True) for cls in FUSABLE_ACTIVATIONS]


def demo(rng):
    x = rng.standard_normal((2, 8, 16, 16)).astype(np.float32)
    return [(f"activation {cls.activation_name()}", F.activation_desc(x, _activation(cls)), [x])
            for cls in FUSABLE_ACTIVATIONS]
