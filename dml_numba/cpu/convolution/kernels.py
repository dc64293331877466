"""The CPU convolution's kernel classes, one per algorithm: the one table ``make_kernel`` and the
tuner build from (``KERNELS[algorithm](desc, options, plan=plan)``), and the emitters of every
kernel they generate, by ``key.kernel`` (each class declares its own: ``emitters``)."""
from __future__ import annotations

from .blocked import BlockedKernel
from .direct import DirectKernel
from .gemm import GemmKernel

#: algorithm -> its kernel class
KERNELS = {k.algorithm: k for k in (DirectKernel, GemmKernel, BlockedKernel)}

#: key.kernel -> the emitter of that kernel (no two classes name the same kernel)
EMITTERS = {name: fn for k in KERNELS.values() for name, fn in k.emitters.items()}
assert len(EMITTERS) == sum(len(k.emitters) for k in KERNELS.values())
