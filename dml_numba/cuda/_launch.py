"""Launch geometry, chosen in one place. Kernels use a grid-stride loop over output elements,
so any geometry is correct; this picks a fast one on hardware and a small one on the simulator
(which runs every CUDA thread as a Python thread).

On hardware the block size comes from the kernel's own resources: the registers and shared
memory NVIDIA's compiler gave it, through the occupancy calculator below (NVIDIA's CUDA C++
Programming Guide, "Occupancy"), the candidate with the most resident warps per SM.
"""
from __future__ import annotations

THREADS_PER_BLOCK = 256  # without resource figures (and the preferred size on a tie)
#: candidates in order of preference on a tie: 256 and 128 keep several blocks per SM
CANDIDATES = (256, 128, 512, 1024)
MAX_BLOCKS = 65535 * 32  # far below the x-dimension limit; grid-stride covers the rest
SIM_THREADS, SIM_BLOCKS = 8, 2

#: per streaming multiprocessor: (registers, max warps, max blocks, shared bytes, register
#: allocation unit per warp); NVIDIA's CUDA C++ Programming Guide, compute capabilities table
SM_LIMITS = {
    (8, 0): (65536, 64, 32, 164 * 1024, 256),
    (8, 6): (65536, 48, 16, 100 * 1024, 256),
    (8, 9): (65536, 48, 24, 100 * 1024, 256),
    (9, 0): (65536, 64, 32, 228 * 1024, 256),
}


def occupancy(registers: int, shared_bytes: int, threads: int, cc) -> float:
    """Theoretical occupancy (active warps / maximum warps per SM) of blocks of ``threads``."""
    regs_sm, max_warps, max_blocks, smem_sm, unit = SM_LIMITS.get(tuple(cc), SM_LIMITS[(8, 0)])
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // unit) * unit
    by_regs = (regs_sm // per_warp) // warps
    by_smem = smem_sm // shared_bytes if shared_bytes else max_blocks
    blocks = min(max_blocks, max_warps // warps, by_regs, by_smem)
    return blocks * warps / max_warps


def block_size(registers: int, shared_bytes: int, cc) -> int:
    """The candidate block size with the highest theoretical occupancy (the first of
    ``CANDIDATES`` on a tie); 255 registers or fewer always fit 128 threads."""
    return max(CANDIDATES, key=lambda t: (occupancy(registers, shared_bytes, t, cc),
                                          -CANDIDATES.index(t)))


def geometry(total: int, simulator: bool, threads: int = THREADS_PER_BLOCK,
             fixed: int | None = None) -> tuple[int, int]:
    """(blocks, threads per block) for ``total`` output elements, or ``total`` tiles of a kernel
    written for blocks of ``fixed`` threads (shared-memory tiles: one tile a block at a time)."""
    if fixed:
        return max(1, min(SIM_BLOCKS if simulator else MAX_BLOCKS, total)), fixed
    if simulator:
        return max(1, min(SIM_BLOCKS, -(-total // SIM_THREADS))), SIM_THREADS
    return max(1, min(MAX_BLOCKS, -(-total // threads))), threads
