"""Operator descriptors: one module per operator (descriptor, validation, shape rule, function)."""
from .activation import *  # noqa: F401,F403 - the 18 activation descs
from .activation import FUSABLE_ACTIVATIONS, ActivationDesc  # noqa: F401
from .convolution import ConvolutionDirection, ConvolutionMode, ConvolutionOperatorDesc, convolution  # noqa: F401
from .lp_pooling import LpPooling1OperatorDesc, LpPoolingOperatorDesc, lp_pooling  # noqa: F401
from .padding import Padding1OperatorDesc, PaddingMode, PaddingOperatorDesc, padding  # noqa: F401
from .slice import Slice1OperatorDesc, SliceOperatorDesc, slice1  # noqa: F401
from .tile import TileOperatorDesc, tile  # noqa: F401
