"""SamplingConfig: the plain sampling settings, below both the model and the sampling layers.

A model card records the sampling its model was trained for (models.registry, the adapters'
`default_sampling`) and the samplers take the same settings (sampling.py re-exports the class). Keeping
the dataclass here lets the model layer name it without importing the sampling layer.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class SamplingConfig:
    cfg_scale: float = 4.0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        checks = [("cfg_scale", self.cfg_scale >= 0, ">= 0"), ("temperature", self.temperature >= 0, ">= 0"),
                  ("top_k", self.top_k >= 0, ">= 0 (0 = off)"), ("top_p", 0 < self.top_p <= 1, "in (0, 1]")]
        for name, ok, want in checks:
            if not ok:
                raise ValueError(f"sampling {name} must be {want}, got {getattr(self, name)}")

    @property
    def uses_cfg(self) -> bool:
        return self.cfg_scale > 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return asdict(self)
