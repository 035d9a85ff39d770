"""The library's public names: what the nodes, the benchmark and a user's script import (one module).

Everything here is stable; modules not re-exported here are the library's internals.
"""
from __future__ import annotations

from .engine import MethodConfig, VerifierConfig, generate
from .sampling import SamplingConfig
from .upsample import UpsamplerConfig
