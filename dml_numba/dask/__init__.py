"""Every operator on Dask arrays: ``padding``, ``lp_pooling``, ``convolution``, ``tile``,
``slice1``, ``max_pooling``, ``average_pooling``, ``element_wise_add``,
``element_wise_multiply``, ``batch_normalization``, ``gemm``, ``join`` and ``activation`` with
the functional
layer's signatures, taking and returning ``dask.array.Array``,
lazily, for any chunking along any axis, on any Dask scheduler (threads, processes,
``distributed``). Install with ``pip install "dml_numba[dask]"``.

How each output block is made (nothing is ever materialised whole):

* **Data movement** (padding in every mode, tile, slice1 with negative strides): each output
  axis is an index map of the descriptor (``gather_plan``). An output block reads, per axis, the
  input coordinates its map names; the block is a gather from just that input region (read
  from the input chunks it overlaps, however many), so reflection, symmetric and wrap padding
  wider than a chunk or than the whole array are exact. Results are bit-for-bit equal to the
  in-memory functional layer.
* **Forward convolution and LP pooling**: output chunks follow the input's chunks divided by the
  stride; an output block ``[o0, o1)`` reads the input window ``[o0*s - start, (o1-1)*s +
  (k-1)*d - start + 1)`` (the halo from the descriptor), and the part of that window outside the
  array becomes the block's own start/end padding, so the in-memory operator (on ``device``)
  computes the block exactly. The batch axis keeps its chunks; the channel axis is taken whole
  (a convolution needs every channel of a group).
* **Transposed (BACKWARD) convolution**, from the gather form: output ``o`` receives input ``i``
  through tap ``t`` where ``o = i*s + t*d - start``, so an output block reads the inputs that
  reach it; its own start padding crops what they write before the block, its end padding
  what they write after it (output chunks follow the input's chunks times the stride).
* **Max and average pooling**: the same halos as LP pooling, each block run with its own
  padding (their padding is not zeros to pad in: a maximum never takes it, an average that
  does not count it divides by fewer taps).
* **Element-wise operators, the activations and batch normalization**: block by block
  (operands broadcast and cut like the first one; batch normalization's parameters whole, the
  channel axis whole).
* **GEMM**: block by block along the batch axes and M, K and N whole; **join**: Dask's own
  concatenation of the inputs' blocks (nothing to compute), checked as DirectML's JOIN.
* A block whose window lies wholly in the padding (padding wider than the kernel, or gaps of a
  stride wider than the kernel) is computed from zeros, which is what padding reads.

Chunks smaller than the halo need no rechunking and give no wrong answer: each output block is
one task that reads the input chunks its window overlaps (a view where it lies in one chunk,
one copy where it spans several), so a block costs one task however many chunks it spans.

Output chunks are regular (one size per axis, the last one smaller), so results store to Zarr as
they are. Forward windows run every block on one compiled kernel per batch-chunk size: edge
blocks are padded with the zeros their padding reads (and a short last block with enough to
make it full size, the surplus dropped), at the cost of a copy of the edge blocks' regions;
transposed blocks add a handful of kernels for their edges. Each worker
compiles or loads kernels through the normal caches (one disk cache per machine, safe under
concurrent writers: entries are written atomically under content-hashed names).

The functions live in private modules by family (``_data_movement``, ``_windows``,
``_arithmetic``, ``_graph``; what they share in ``_common``) and are this module's.
"""
from __future__ import annotations

from ._arithmetic import (
    activation,
    batch_normalization,
    element_wise_add,
    element_wise_multiply,
    gemm,
)
from ._data_movement import join, padding, slice1, tile
from ._graph import graph
from ._windows import average_pooling, convolution, lp_pooling, max_pooling

__all__ = ["padding", "lp_pooling", "convolution", "tile", "slice1", "max_pooling",
           "average_pooling", "element_wise_add", "element_wise_multiply", "batch_normalization",
           "gemm", "join", "activation", "graph"]

# the functions are this module's (documentation and pickling by reference)
for _f in [v for k, v in list(globals().items()) if callable(v) and not k.startswith("_")
           and getattr(v, "__module__", "").startswith(__name__ + "._")]:
    _f.__module__ = __name__
del _f
