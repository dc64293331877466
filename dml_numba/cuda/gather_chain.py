"""A chain of data-movement operators on CUDA, fused: one thread per output element maps its
coordinates through every operator (last first) and stores once; no intermediate."""
from __future__ import annotations

from .._codegen import SourceWriter, decompose, index
from .._dtypes import DataType
from .._gather import (
    chain_constants,
    chain_tables,
    emit_chain_axis,
    emit_select,
    merge_conds,
    storage_dtype,
    table_levels,
)
from .._registry import register
from ..ops.gather_chain import GatherChainDesc
from ._emit import CudaKernel, element_loop, header, make_key


def emit(key) -> str:
    desc = key.desc
    plans = desc.gather_plans()
    sizes = desc.output_tensor.sizes
    o = [f"o{d}" for d in range(len(sizes))]
    i = [f"i{d}" for d in range(len(sizes))]
    w = SourceWriter()
    tables_src, tables = chain_tables(desc, range(len(sizes)))
    header(w, key, tuple(tables_src))
    w("# one thread per output element of the chain " + " -> ".join(
        type(op).op_name() for op in desc.operators) + "; each axis maps the output coordinate "
      "through them, last first")
    chain_constants(w, plans, desc.output_tensor.data_type, table_levels(tables))
    w()
    w()
    with element_loop(w, key, "x, y", desc.output_tensor.element_count):
        decompose(w, "f", o, sizes)
        conds = merge_conds([emit_chain_axis(w, plans, d, o[d], i[d], tables)
                             for d in range(len(o))])
        emit_select(w, conds, lambda k: w(f"y[{index(*o)}] = C{k}"),
                    lambda: w(f"y[{index(*o)}] = x[{index(*i)}]"))
    return w.text()


def gather_chain_kernel(desc, options) -> CudaKernel:
    key = make_key(desc, options)
    dt = storage_dtype(desc.input_tensor.data_type)
    rank = desc.input_tensor.rank
    return CudaKernel(key, emit(key), [(dt, rank), (dt, rank)], desc.output_tensor.element_count,
                      f16_bits=desc.input_tensor.data_type == DataType.FLOAT16)


register(GatherChainDesc, "cuda")(gather_chain_kernel)
