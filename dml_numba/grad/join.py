"""Join's gradient: the output's gradient split along the axis, each input its part."""
from __future__ import annotations

import numpy as np

from ..ops.join import JoinOperatorDesc
from . import gradient


@gradient(JoinOperatorDesc)
def join_backward(d, inputs, grad):
    cuts = list(np.cumsum([t.sizes[d.axis] for t in d.input_tensors])[:-1])
    return [np.ascontiguousarray(g) for g in np.split(grad, cuts, axis=d.axis)]
