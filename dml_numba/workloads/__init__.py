"""Example workloads per operator, with the peers that compute the same thing.

Each operator has a module of its own name here (``workloads/<op>.py``, the same slice name as in
``ops/``, ``cpu/``, ...) defining

* ``workloads(quick) -> list[Workload]``: realistic sizes for ``dml-numba profile`` (``quick``
  shrinks them), each with the peer calls (NumPy's own function, PyTorch, ONNX Runtime) that
  compute the same result;
* ``demo(rng) -> list[(label, desc, inputs)]``: one or two small cases for ``dml-numba demo``.

The profiler, the demo and ``dml-numba info --cuda-kernels`` find the modules by discovery:
adding an operator adds a module here and edits no list.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field

import numpy as np

from .._dtypes import DataType
from ..tensor import TensorDesc


@dataclass
class Workload:
    op: str                 # the functional layer's name (``--ops``)
    name: str
    make: object            # (dtype, rng) -> (desc, inputs)
    kind: str               # "bytes" (GB/s) or "flops" (GFLOP/s)
    peers: dict = field(default_factory=dict)  # name -> (desc, inputs) -> callable
    float_only: bool = False


def workload(op: str, name: str, spec, kind: str, float_only: bool = False) -> Workload:
    """A Workload from a module's builder, whose ``spec`` is ``(make, peers)``."""
    make, peers = spec
    return Workload(op, name, make, kind, peers, float_only)


def modules():
    """Every operator's workload module, in name order."""
    return [importlib.import_module(f"{__name__}.{m.name}")
            for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
            if not m.name.startswith("_")]


def suite(quick: bool) -> list[Workload]:
    """Every module's workloads."""
    return [w for mod in modules() for w in mod.workloads(quick)]


def demos(rng) -> list:
    """Every module's demo cases: ``(label, desc, inputs)``."""
    return [case for mod in modules() for case in mod.demo(rng)]


# -- helpers for the modules ----------------------------------------------------------------------

def sizes(quick: bool) -> dict:
    """The suite's common sizes: an RGB image, a batch, and a (batch, channels, H, W) activation."""
    return {"image": (1, 3, 540, 960) if quick else (1, 3, 1080, 1920),
            "batch": 1 if quick else 8,
            "activation": (4, 16, 128, 128) if quick else (8, 16, 256, 256)}


def tensor(dtype, shape) -> TensorDesc:
    return TensorDesc(DataType.from_numpy(dtype), shape)


def data(shape, dtype, rng):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 100, size=shape).astype(dtype)


class PeerUnavailable(Exception):
    pass


_torch_device = "cpu"  # where torch_call puts its tensors (gpu_peers runs the CPU peer on CUDA)


def torch_call(fn, arrays):
    """A callable running ``fn(torch, *tensors)`` without autograd, or PeerUnavailable. Under
    :func:`gpu_peers`' "torch-cuda", the tensors live on the GPU and each call synchronises."""
    try:
        import torch
    except ImportError:
        raise PeerUnavailable("torch is not installed") from None
    device = _torch_device
    if device == "cuda" and not torch.cuda.is_available():
        raise PeerUnavailable("PyTorch has no CUDA device here")
    tensors = [torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays]

    def call():
        with torch.no_grad():
            result = fn(torch, *tensors)
        if device == "cuda":
            torch.cuda.synchronize()
        return result

    return call


def _on_torch_device(device, factory, desc, arrays):
    global _torch_device
    previous, _torch_device = _torch_device, device
    try:
        return factory(desc, arrays)
    finally:
        _torch_device = previous


def _cupy_call(factory, desc, arrays):
    """The NumPy peer ``factory`` on CuPy arrays: NumPy hands ``np.pad``, ``np.tile``, slicing
    and ``np.ascontiguousarray`` of a CuPy array to CuPy's own implementation (NEP 18)."""
    try:
        import cupy
    except ImportError:
        raise PeerUnavailable("cupy is not installed") from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise PeerUnavailable("CuPy finds no GPU")
    except cupy.cuda.runtime.CUDARuntimeError:
        raise PeerUnavailable("CuPy finds no GPU") from None
    fn = factory(desc, [cupy.asarray(a) for a in arrays])

    def call():
        result = fn()
        cupy.cuda.Device().synchronize()
        return result

    return call


def gpu_peers(peers: dict) -> dict:
    """The GPU forms of a workload's CPU peers, for profiling the "cuda" device: "torch-cuda"
    runs the "torch" peer on the GPU (cuDNN for convolution), "cupy..." runs each NumPy peer
    ("numpy.pad" -> "cupy.pad") on CuPy arrays. Each raises PeerUnavailable where its library or
    a GPU is missing."""
    out = {}
    if "torch" in peers:
        out["torch-cuda"] = lambda d, xs, f=peers["torch"]: _on_torch_device("cuda", f, d, xs)
    for name, factory in peers.items():
        if name.startswith("numpy"):
            out["cupy" + name[len("numpy"):]] = lambda d, xs, f=factory: _cupy_call(f, d, xs)
    return out


def ort_call(op_type, inputs, extra_inputs=(), **attrs):
    """A callable running one ONNX node on ONNX Runtime's CPU provider, or PeerUnavailable."""
    try:
        import onnxruntime as ort
        from onnx import helper
    except ImportError:
        raise PeerUnavailable("onnxruntime/onnx is not installed") from None
    arrays = list(inputs) + list(extra_inputs)
    names = [f"in{i}" for i in range(len(arrays))]
    elem = helper.np_dtype_to_tensor_dtype(arrays[0].dtype)
    info = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for nm, a in zip(names, arrays)]
    graph = helper.make_graph([helper.make_node(op_type, names, ["out"], **attrs)], "g", info,
                              [helper.make_tensor_value_info("out", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    try:
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - an op/dtype ORT does not implement
        first = str(exc).splitlines()[0][:80]
        raise PeerUnavailable(f"onnxruntime cannot run it ({first})") from None
    feed = dict(zip(names, arrays))
    return lambda: session.run(None, feed)
