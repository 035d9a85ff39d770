"""mulosd_core: Multi-Scale Local Speculative Decoding for autoregressive image models.

A plain PyTorch library (no ComfyUI import) that runs LlamaGen-format models, the
plain AR sampler, and the MuLo-SD engine with its baselines. See docs/ARCHITECTURE.md.
"""

__version__ = "0.1.0"
