"""Binding for the "cuda" device.

NumPy inputs are validated and bound exactly as on the host devices (any layout, strided 1-D
buffers), copied to the GPU, and the result comes back as NumPy (into ``out`` if given). Device
arrays -- Numba's, or anything with ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors) --
stay on the GPU and the result is a device array; such arrays must have the desc's shape (strided
1-D *device* buffers are not supported: bind a view of the tensor's shape instead).
"""
from __future__ import annotations

import numpy as np

from .._binding import check_no_overlap, check_outputs_apart, overlaps, same_view, view_host
from .._errors import DeviceUnavailableError, ValidationError


def is_device_array(cuda, a) -> bool:
    """Numba device arrays and anything with ``__cuda_array_interface__`` (the simulator has
    only its own fake arrays and no ``is_cuda_array``)."""
    if hasattr(cuda, "is_cuda_array"):
        return cuda.is_cuda_array(a) or cuda.devicearray.is_cuda_ndarray(a)
    return cuda.devicearray.is_cuda_ndarray(a)


def as_device_array(cuda, a):
    if cuda.devicearray.is_cuda_ndarray(a):
        return a
    return cuda.as_cuda_array(a)


def _check_device_array(cuda, a, tdesc, owner, field):
    where = f"{owner}.{field}"
    d = as_device_array(cuda, a)
    if d.dtype != tdesc.dtype:
        raise ValidationError(f"{where}: dtype {d.dtype} is invalid; expected {tdesc.dtype} "
                              f"({tdesc.data_type.name})")
    if tuple(d.shape) != tdesc.sizes:
        raise ValidationError(f"{where}: device array shape {tuple(d.shape)} is invalid; expected "
                              f"{tdesc.sizes} (strided 1-D buffers are accepted only as NumPy)")
    return d


class CudaDevice:
    name = "cuda"

    def __init__(self, cuda):
        self.cuda = cuda

    # -- what callers above the backend (compiled graphs) use, without importing it ---------
    def is_device_array(self, a) -> bool:
        return is_device_array(self.cuda, a)

    def to_device(self, a):
        return self.cuda.to_device(a)

    def device_array(self, shape, dtype):
        return self.cuda.device_array(shape, dtype)

    def as_array(self, a):
        """A device array (anything with ``__cuda_array_interface__``) as Numba's, sharing its
        memory: what :meth:`run_checked` launches on."""
        return as_device_array(self.cuda, a)

    def before_binding(self, kernels) -> None:
        """Nothing: a CUDA kernel takes no host thread's scratch (the host devices' hook,
        :meth:`dml_numba._binding.HostDevice.before_binding`)."""

    def run_checked(self, kernel, inputs, out) -> None:
        """Launch ``kernel`` on Numba device arrays the caller has checked (a compiled graph's
        steps: :meth:`dml_numba.CompiledOperator.run_checked`), on the default stream."""
        kernel(inputs, out, None)

    def on(self, index: int) -> CudaDevice:
        """This device for the ``index``-th GPU ("cuda:N"): every call runs in its context."""
        count = len(self.cuda.gpus)
        if index >= count:
            raise DeviceUnavailableError(
                f"device 'cuda:{index}' is not usable here: {count} GPU"
                f"{'s' if count != 1 else ''} ({', '.join(f'cuda:{i}' for i in range(count))})")
        return _OnGpu(self.cuda, index)

    def call(self, kernel, owner, input_specs, inputs, out, out_desc, stream, in_place=False):
        return self.call_many(kernel, owner, input_specs, inputs, (out,),
                              (("out", out_desc),), stream, single=True, in_place=in_place)[0]

    def call_many(self, kernel, owner, input_specs, inputs, outs, out_specs, stream, *,
                  single=False, in_place=False):
        """The call of an operator of one or several outputs (``outs``: one array or None per
        output; ``out_specs``: ``(field, desc)`` each): NumPy inputs copied to the GPU, the
        outputs made there or checked (no output overlapping an input or an earlier output),
        only then the launch (the kernel gets the output, or the tuple of outputs). Returns
        the tuple of outputs: the ``outs`` given, and the others as device arrays where any
        input was one, else as NumPy."""
        cuda = self.cuda
        on_device = False
        host_views, dev_inputs = [], []
        for a, (field, t) in zip(inputs, input_specs):
            if isinstance(a, np.ndarray):
                v = view_host(a, t, owner, field)
                host_views.append(v)
                dev_inputs.append(v)
            elif is_device_array(cuda, a):
                dev_inputs.append(_check_device_array(cuda, a, t, owner, field))
                on_device = True
            else:
                raise ValidationError(f"{owner}.{field}: {type(a).__name__} is invalid; expected a "
                                      "numpy.ndarray or a CUDA device array")
        host_outs, d_outs, given = [], [], []  # given: the caller's device outputs, by index
        for k, (out, (_, out_desc)) in enumerate(zip(outs, out_specs)):
            name = "out" if single else f"out[{k}]"
            host_out = None
            if out is None:
                d_out = cuda.device_array(out_desc.sizes, out_desc.dtype, stream=stream or 0)
            elif isinstance(out, np.ndarray):
                host_out = view_host(out, out_desc, owner, name, writable=True)
                check_no_overlap(host_out, host_views, owner, name, in_place=in_place)
                check_outputs_apart(host_out, host_outs, owner, k)
                d_out = cuda.device_array(out_desc.sizes, out_desc.dtype, stream=stream or 0)
            elif is_device_array(cuda, out):
                d_out = _check_device_array(cuda, out, out_desc, owner, name)
                for i, d in enumerate(dev_inputs):
                    if not isinstance(d, np.ndarray) and overlaps(d, d_out) and not (
                            in_place and same_view(d, d_out)):
                        raise ValidationError(f"{owner}.{name}: a device array overlapping input "
                                              f"{i} is invalid; expected an output that shares "
                                              "no memory with the inputs")
                check_outputs_apart(d_out, given, owner, k)
            else:
                raise ValidationError(f"{owner}.{name}: {type(out).__name__} is invalid; expected "
                                      "a numpy.ndarray or a CUDA device array")
            host_outs.append(host_out)
            given.append(d_out if host_out is None and out is not None else None)
            d_outs.append(d_out)
        # every check passed: only now copy and launch
        dev_inputs = [cuda.to_device(np.ascontiguousarray(d), stream=stream or 0)
                      if isinstance(d, np.ndarray) else d for d in dev_inputs]
        kernel(dev_inputs, d_outs[0] if single else tuple(d_outs), stream)
        results = []
        for out, host_out, d_out in zip(outs, host_outs, d_outs):
            if host_out is not None:
                host_out[...] = d_out.copy_to_host(stream=stream or 0)
                results.append(out)
            elif out is not None:
                results.append(out)
            else:
                results.append(d_out if on_device else d_out.copy_to_host(stream=stream or 0))
        return tuple(results)


class _OnGpu(CudaDevice):
    """The CUDA device pinned to one GPU."""

    def __init__(self, cuda, index: int):
        super().__init__(cuda)
        self.index = index
        self.name = f"cuda:{index}"

    def call_many(self, *args, **kwargs):
        with self.cuda.gpus[self.index]:
            return super().call_many(*args, **kwargs)

    def run_checked(self, kernel, inputs, out) -> None:
        with self.cuda.gpus[self.index]:
            super().run_checked(kernel, inputs, out)
