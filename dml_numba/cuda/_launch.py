"""Launch geometry, chosen in one place. Kernels use a grid-stride loop over output elements,
so any geometry is correct; this picks a fast one on hardware and a small one on the simulator
(which runs every CUDA thread as a Python thread)."""
from __future__ import annotations

THREADS_PER_BLOCK = 256
MAX_BLOCKS = 65535 * 32  # far below the x-dimension limit; grid-stride covers the rest
SIM_THREADS, SIM_BLOCKS = 8, 2


def geometry(total: int, simulator: bool) -> tuple[int, int]:
    """(blocks, threads per block) for ``total`` output elements."""
    if simulator:
        return max(1, min(SIM_BLOCKS, -(-total // SIM_THREADS))), SIM_THREADS
    return max(1, min(MAX_BLOCKS, -(-total // THREADS_PER_BLOCK))), THREADS_PER_BLOCK
