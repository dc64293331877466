"""Three CNNs defined in PyTorch without torchvision (random weights, eval mode), for the ONNX
loader's end-to-end tests and the CNN benchmark: a ResNet-18, a MobileNetV2 and a small U-Net,
exported by ``torch.onnx.export``'s TorchScript exporter at opset 17, as a user exports them."""
from __future__ import annotations

import io


def _torch():
    import torch
    from torch import nn

    return torch, nn


def resnet18(num_classes: int = 1000, widths=(64, 128, 256, 512), blocks=2):
    """ResNet-18 (``widths`` and ``blocks`` per stage shrink it for quick tests)."""
    torch, nn = _torch()

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return self.relu(y + idt)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            w0 = widths[0]
            self.stem = nn.Sequential(nn.Conv2d(3, w0, 7, 2, 3, bias=False), nn.BatchNorm2d(w0),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], w0
            for i, cout in enumerate(widths):
                stride = 1 if i == 0 else 2
                layers += [BasicBlock(cin, cout, stride)] + [BasicBlock(cout, cout, 1)
                                                             for _ in range(blocks - 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, num_classes)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))

    return _randomised(ResNet18())


def mobilenet_v2(num_classes: int = 1000, width: float = 1.0):
    torch, nn = _torch()

    def conv_bn(cin, cout, k, stride, groups=1, relu=True):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if relu:
            layers.append(nn.ReLU6(inplace=True))
        return nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            self.residual = stride == 1 and cin == cout
            layers = [conv_bn(cin, hidden, 1, 1)] if expand != 1 else []
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden),
                       conv_bn(hidden, cout, 1, 1, relu=False)]
            self.body = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            c = lambda v: max(8, int(v * width + 4) // 8 * 8)  # noqa: E731
            layers, cin = [conv_bn(3, c(32), 3, 2)], c(32)
            for t, ch, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
                for i in range(n):
                    layers.append(InvertedResidual(cin, c(ch), s if i == 0 else 1, t))
                    cin = c(ch)
            layers.append(conv_bn(cin, 1280, 1, 1))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Linear(1280, num_classes)

        def forward(self, x):
            x = self.features(x)
            x = nn.functional.adaptive_avg_pool2d(x, 1)
            return self.classifier(torch.flatten(x, 1))

    return _randomised(MobileNetV2())


def unet(channels: int = 3, classes: int = 2, base: int = 16, depth: int = 3):
    torch, nn = _torch()

    def double(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                             nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            widths = [base * 2 ** i for i in range(depth + 1)]
            self.downs = nn.ModuleList([double(channels, widths[0])] + [
                double(widths[i], widths[i + 1]) for i in range(depth)])
            self.pool = nn.MaxPool2d(2)
            self.ups = nn.ModuleList([nn.ConvTranspose2d(widths[i + 1], widths[i], 2, 2)
                                      for i in reversed(range(depth))])
            self.convs = nn.ModuleList([double(2 * widths[i], widths[i])
                                        for i in reversed(range(depth))])
            self.head = nn.Conv2d(widths[0], classes, 1)

        def forward(self, x):
            skips = []
            for i, down in enumerate(self.downs):
                x = down(x if i == 0 else self.pool(x))
                skips.append(x)
            skips.pop()
            for up, conv in zip(self.ups, self.convs):
                x = conv(torch.cat([skips.pop(), up(x)], 1))
            return self.head(x)

    return _randomised(UNet())


def _randomised(model):
    """Eval mode, with batch norm statistics and affine parameters drawn at random (fresh
    ones are 0/1: folding them would test nothing)."""
    torch, nn = _torch()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
    return model.eval()


def export(model, shape, opset: int = 17, fold: bool = True, batch: str | None = None) -> bytes:
    """The model as ``torch.onnx.export`` writes it (TorchScript exporter), as bytes;
    ``fold``: PyTorch's own constant folding (which folds batch norms into convolutions: off,
    the model keeps its BatchNormalization nodes); ``batch``: the batch axis made symbolic
    under that name."""
    import warnings

    torch, _ = _torch()
    buf = io.BytesIO()
    torch.manual_seed(0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(model, torch.zeros(shape), buf, opset_version=opset,
                          input_names=["x"], output_names=["y"], dynamo=False,
                          do_constant_folding=fold,
                          dynamic_axes={"x": {0: batch}, "y": {0: batch}} if batch else None)
    return buf.getvalue()


def tiny_resnet():
    """A ResNet of two stages of one block (8 and 16 channels): every kind of node of the
    full one, for the quick tests."""
    return resnet18(num_classes=10, widths=(8, 16), blocks=1)


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "unet": unet}
