"""What a CUDA kernel costs on the hardware, found without a GPU: NVIDIA's compiler (the
nvJitLink library of the ``numba-cuda[cu13]`` wheels runs ptxas on the kernel's PTX) reports
registers, spills, shared and local memory; the block size we launch with and its occupancy
follow from them (``_launch.block_size``, NVIDIA's occupancy calculator).
"""
from __future__ import annotations

import re

from ._launch import block_size, occupancy


def _link_log(ptx: str, cc) -> str:
    from cuda.bindings import nvjitlink

    handle = nvjitlink.create(2, [f"-arch=sm_{cc[0]}{cc[1]}", "-verbose"])
    try:
        data = ptx.encode()
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "dml_numba")
        nvjitlink.complete(handle)
        buf = bytearray(nvjitlink.get_info_log_size(handle))
        nvjitlink.get_info_log(handle, buf)
        return buf.decode(errors="replace")
    finally:
        nvjitlink.destroy(handle)


def parse_ptxas(log: str) -> dict:
    """Registers, spill bytes (stores + loads), stack and shared bytes from a ptxas log."""
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    stack = re.search(r"(\d+) bytes stack frame", log)
    smem = re.search(r"(\d+) bytes smem", log)
    if regs is None:
        raise RuntimeError(f"no register count in NVIDIA's compiler log:\n{log[-2000:]}")
    return {"registers": int(regs.group(1)),
            "spill_bytes": int(spill.group(1)) + int(spill.group(2)) if spill else 0,
            "stack_bytes": int(stack.group(1)) if stack else 0,
            "shared_bytes": int(smem.group(1)) if smem else 0}


def resource_usage(desc, cc=(9, 0), **options) -> list[dict]:
    """For each kernel of ``desc``'s CUDA lowering: name, registers, spill_bytes, stack_bytes,
    shared_bytes, threads_per_block (the block size launched on that architecture) and the
    theoretical occupancy at it. Needs
    NVIDIA's compiler wheels, not a GPU."""
    from . import kernel_for

    kernel = kernel_for(desc, **options)
    info = parse_ptxas(_link_log(kernel.ptx(cc), cc))
    threads = kernel.block or block_size(info["registers"], info["shared_bytes"], cc)
    info.update(name=kernel.key.op, cc=f"sm_{cc[0]}{cc[1]}", threads_per_block=threads,
                occupancy=occupancy(info["registers"], info["shared_bytes"], threads, cc))
    return [info]
