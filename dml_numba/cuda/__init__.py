"""placeholder"""
from .._registry import mark_unavailable
mark_unavailable("cuda", "not built yet")
