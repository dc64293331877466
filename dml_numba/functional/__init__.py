"""The functional layer: each function builds its operator's descriptor from arrays and
parameters (output sizes from the operator's one shape rule), compiles it through the same cache
as :func:`dml_numba.compile_operator`, and runs it.

Inputs are anything ``numpy.asarray`` accepts (lists, scalars, objects with ``__array__``), or
CUDA device arrays for ``device="cuda"``; masked arrays and object arrays are refused; a
non-native byte order is converted. A repeated call with the same shapes, dtypes and parameters
skips building the descriptor (a memo keyed by the inputs' shapes and dtypes and by the
parameters' values).

The functions live in private modules by family (``_data_movement``, ``_pooling``,
``_convolution``, ``_arithmetic``; the call they share in ``_call``) and are this module's: each
``<op>_desc`` builder, ``run`` and the memo's ``RECENT`` and ``_recent`` are re-exported here.
"""
from __future__ import annotations

from ._arithmetic import (
    activation,
    activation_desc,
    batch_normalization,
    batch_normalization_desc,
    element_wise_add,
    element_wise_add_desc,
    element_wise_multiply,
    element_wise_multiply_desc,
    gemm,
    gemm_desc,
)
from ._call import RECENT, _recent, run
from ._convolution import bias_sizes, convolution, convolution_desc
from ._data_movement import (
    join,
    join_desc,
    last_axes,
    padding,
    padding_desc,
    slice1,
    slice1_desc,
    tile,
    tile_desc,
)
from ._pooling import (
    average_pooling,
    average_pooling_desc,
    lp_pooling,
    lp_pooling_desc,
    max_pooling,
    max_pooling_desc,
)

__all__ = ["padding", "lp_pooling", "convolution", "tile", "slice1", "max_pooling",
           "average_pooling", "element_wise_add", "element_wise_multiply",
           "batch_normalization", "gemm", "join", "activation"]

#: ``slice`` is the operator's everyday name (the DML_SLICE1 version is the one implemented)
slice = slice1  # shadows the builtin in this module only, where it is not used
#: the functional layer's other names for its operators (in ``dml_numba`` too)
OTHER_NAMES = {"slice": slice1}

# the functions are this module's (documentation, doctest, pickling by reference)
for _f in [v for k, v in list(globals().items()) if callable(v) and not k.startswith("_")
           and getattr(v, "__module__", "").startswith(__name__ + "._")]:
    _f.__module__ = __name__
del _f
