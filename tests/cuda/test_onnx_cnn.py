"""Real CNNs from PyTorch on the "cuda" device (Numba's simulator here, a GPU where there is
one), against ONNX Runtime: a small ResNet and a small U-Net at 8 x 8 (the simulator runs one
Python thread per output element)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is in the [test] extra")
ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime is in the [test] extra")
pytest.importorskip("torch", reason="PyTorch is optional: exports need it")

from dml_numba.onnx import compile_model  # noqa: E402
from tests import cnn_models as C  # noqa: E402

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("name", ["tiny_resnet", "unet"])
def test_small_networks_match_onnx_runtime(name):
    net = C.tiny_resnet() if name == "tiny_resnet" else C.unet(base=2, depth=1)
    b = C.export(net, (1, 3, 8, 8), fold=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    y = compile_model(onnx.load_from_string(b), "cuda")(x)
    ref = ort.InferenceSession(b, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.shape == ref.shape
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


def test_a_models_weights_go_to_the_gpu_once():
    """The weights are the model's own frozen copies: copied to the device on the first call
    and kept; the input is copied on every call (and a host input gives a host result)."""
    from dml_numba._registry import get_device

    b = C.export(C.tiny_resnet(), (1, 3, 8, 8))
    m = compile_model(onnx.load_from_string(b), "cuda")
    dev = get_device("cuda")
    copies = []
    original = type(dev).to_device

    def counting(self, a):
        copies.append(a.shape)
        return original(self, a)

    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    try:
        type(dev).to_device = counting
        first = m(x)
        n_first = len(copies)
        second = m(x)
    finally:
        type(dev).to_device = original
    assert isinstance(first, np.ndarray) and isinstance(second, np.ndarray)
    assert n_first == 1 + len(m._consts) and len(copies) == n_first + 1  # the input again
    np.testing.assert_array_equal(first, second)
