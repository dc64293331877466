"""Join, vectorised: ``numpy.concatenate`` along the axis."""
from __future__ import annotations

import numpy as np

from ..ops.join import JoinOperatorDesc
from ._kernel import vectorized


@vectorized(JoinOperatorDesc)
def join(desc, *inputs):
    return np.concatenate(inputs, axis=desc.axis)
