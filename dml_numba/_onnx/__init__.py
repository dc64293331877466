"""The ONNX loader behind :mod:`dml_numba.onnx`: the model read into DirectML's graph
(``load.py``: values, constants evaluated at load, the graph's edges), one mapping per ONNX
operator onto our descriptors (``nodes.py``), and what is recognised before the nodes are mapped
(``patterns.py``: PyTorch's export of LPPool2d, the operators the loader cannot run)."""
