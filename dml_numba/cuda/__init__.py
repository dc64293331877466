"""The "cuda" device: generated ``@cuda.jit`` kernels (numba-cuda).

The emitters and PTX compilation import without a GPU (``kernel_for(desc).ptx(cc)``), so kernels
can be checked with NVIDIA's compiler anywhere; the device itself registers only when
``numba.cuda`` imports and finds a GPU or Numba's simulator (``NUMBA_ENABLE_CUDASIM=1``).
"""
from .._registry import (
    import_lowerings,
    lowering_for,
    mark_unavailable,
    register_device,
)

try:
    from numba import cuda as _cuda
except ImportError as exc:  # pragma: no cover - numba-cuda is in the test extras
    mark_unavailable("cuda", f"numba-cuda is not installed ({exc}); "
                             "pip install 'dml_numba[cuda]'")
else:
    import_lowerings(__name__, __path__)
    from ._device import CudaDevice

    if _cuda.is_available():
        register_device(CudaDevice(_cuda))
    else:
        mark_unavailable("cuda", "numba.cuda found no usable GPU (no driver or device); set "
                                 "NUMBA_ENABLE_CUDASIM=1 before importing to use Numba's simulator")


def resource_usage(desc, cc=(9, 0), **options) -> list[dict]:
    """Registers, spills, shared memory and theoretical occupancy of ``desc``'s CUDA kernel(s)
    for compute capability ``cc``, from NVIDIA's compiler (no GPU needed); see _resources.
    ``options`` as for ``compile_operator`` (convolution's ``algorithm``)."""
    from ._resources import resource_usage as usage

    return usage(desc, cc, **options)


def kernel_for(desc, **options):
    """The CUDA kernel object for ``desc`` without needing a GPU (for PTX checks)."""
    from .._registry import check_options

    canon = desc.canonical().packed()
    check_options(type(canon), "cuda", options)
    return lowering_for(type(canon), "cuda")(canon, options)


def kernel_variants(desc, *, folds: bool = True) -> list[dict]:
    """Option sets that together give every CUDA kernel ``desc`` can run: the default, and each
    value of the lowering's own options that it takes for ``desc`` (convolution:
    ``algorithm="direct"``, ``"tiled"``; with ``folds``, a folded padding where a kernel reads
    one, as graphs run it: one mode stands for the four, whose maps are the same emitter's,
    every mode of it compiled in the padding kernels)."""
    from .._errors import ValidationError
    from .._registry import lowering_options
    from ..ops._base import FOLDS

    opts = lowering_options(type(desc.canonical().packed()), "cuda")
    variants = [{}]
    for name, values in opts.items():
        for v in values:
            if v is None or v in FOLDS and (not folds or v != "REFLECTION"):
                continue
            try:
                kernel_for(desc, **{name: v})
            except ValidationError:  # not for this descriptor
                continue
            variants.append({name: v})
    return variants
