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
