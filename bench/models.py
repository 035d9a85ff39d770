"""The models a benchmark runs, and what its results record about them and the machine.

An embedded family (target, low-resolution drafter, same-resolution drafter, classifier) or tiny
random models for tests; `model_info` and `hardware` describe them, `default_tag` names the outputs.
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
from dataclasses import dataclass, field
from typing import Any

import torch

from mulosd_core.decode import model_sampling
from mulosd_core.data.families import DataFamily, data_family
from mulosd_core.models.llamagen import self_drafter
from mulosd_core.models.registry import DEFAULT_EMBEDDED_FAMILY
from mulosd_core.presets import EMBEDDED_SAMPLING
from mulosd_core.sampling import SamplingConfig

TINY_SAMPLING = EMBEDDED_SAMPLING   # random tiny models keep the patterns family's sampling


@dataclass
class Models:
    target: Any
    drafter: Any                      # low resolution (r > 1)
    sd_drafter: Any                   # same resolution (r = 1)
    classifier: torch.nn.Module
    kind: str                         # "embedded" or "tiny"
    quality_meaningful: bool
    family: DataFamily                # classes and real images of the run
    info: dict = field(default_factory=dict)

    @property
    def sampling(self) -> SamplingConfig:
        """The sampling every method runs with: the one the target was trained for (its family card)."""
        return model_sampling(self.target)

    def drafter_for(self, kind: str | None):
        """"low": the low-resolution drafter, "same": the same-resolution one, "self": the target itself at
        the low drafter's grid (self-drafting: the same weights, no second model)."""
        if kind == "self":
            return self_drafter(self.target, self.target.grid // self.drafter.grid)
        return {"low": self.drafter, "same": self.sd_drafter, None: None}[kind]


def load_models(kind: str, device: str = "cpu", dtype: torch.dtype = torch.float32, tiny_grid: int = 4,
                family: str = DEFAULT_EMBEDDED_FAMILY, target: str = "target", drafter: str = "") -> Models:
    """An embedded family (+ its classifier), or tiny random models with a random classifier. `target`: the
    family member that is the target ("self_target": the one trained at both grids, for self-drafting).
    `drafter`: the low-resolution drafter as "<family>:<member>" ("scenes:target" drafts for the 128 px
    scenes128 target at r = 2, "scenes:drafter" at r = 4); "" = the family's own drafter."""
    from mulosd_core.train.classifier import PatternClassifier
    if kind == "tiny":
        fam = data_family(family)
        from mulosd_core.testing import tiny_model, tiny_vq
        vq = tiny_vq(1000, 64).to(device)
        mk = lambda grid, seed: tiny_model(grid, seed, vq=vq, dtype=dtype, num_classes=fam.num_classes)
        target, drafter, sd = mk(tiny_grid, 0), mk(max(tiny_grid // 2, 1), 1), mk(tiny_grid, 2)
        for m in (target, drafter, sd):
            m.gpt.to(device)
            m.default_sampling = TINY_SAMPLING
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            clf = PatternClassifier().to(device).eval()
        return Models(target, drafter, sd, clf, "tiny", False, fam,
                      {"note": "tiny random models and a randomly initialised classifier: quality numbers are meaningless"})
    if kind != "embedded":
        raise ValueError(f"--models must be 'embedded' or 'tiny', got {kind!r}")
    from mulosd_core.models.registry import embedded_path, load_embedded
    from mulosd_core.train.classifier import load_classifier
    drafter_family, _, drafter_member = (drafter or f"{family}:drafter").rpartition(":")
    if not drafter_family or not drafter_member:
        raise ValueError(f"--drafter: expected <family>:<member> (e.g. scenes:target), got {drafter!r}")
    target_name, target = target, load_embedded(target, dtype=dtype, device=device, family=family)
    fam = data_family(target.family or family)   # scenes128's card names the scenes data
    try:
        low = load_embedded(drafter_member, dtype=dtype, device=device, vq=target.vq, family=drafter_family)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{e}. Family {family} may have no drafter of its own: name one with --drafter "
                                f"<family>:<member> (scenes128: scenes:target for r = 2, scenes:drafter for r = 4)") from None
    sd = load_embedded("sd_drafter", dtype=dtype, device=device, vq=target.vq, family=family)
    clf = load_classifier(embedded_path("classifier", family), device=device)
    files = {m: embedded_path(m, family) for m in (target_name, "sd_drafter", "vq", "classifier")}
    files["drafter"] = embedded_path(drafter_member, drafter_family)
    info = {"family": family, "target_member": target_name, "drafter": f"{drafter_family}:{drafter_member}",
            "files": {m: _file_info(p) for m, p in files.items()}}
    return Models(target, low, sd, clf, "embedded", True, fam, info)


def _file_info(path: str) -> dict:
    st = os.stat(path)
    return {"bytes": st.st_size, "mtime": _dt.datetime.fromtimestamp(st.st_mtime).isoformat(timespec="seconds")}


def gpt_params(model) -> int:
    return sum(p.numel() for p in model.gpt.parameters())


def model_info(models: Models) -> dict:
    out = {"kind": models.kind, "quality_meaningful": models.quality_meaningful, **models.info}
    for name in ("target", "drafter", "sd_drafter"):
        m = getattr(models, name)
        out[name] = {"name": m.name, "grid": m.grid, "image_size": m.image_size, "vocab": m.vocab_size,
                     "params": gpt_params(m), "dim": m.gpt.config.dim, "layers": m.gpt.config.n_layer}
    return out


def hardware(device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    return {"processor": platform.processor(), "machine": platform.machine(), "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "device": str(device), "device_name": name}


def models_tag(models: str, family: str, quick: bool) -> str:
    """embedded (the default family), embedded-patterns, tiny, ... with -quick for --quick runs."""
    fam = f"-{family}" if models == "embedded" and family != DEFAULT_EMBEDDED_FAMILY else ""
    return f"{models}{fam}" + ("-quick" if quick else "")


def default_tag(device: str, models: str, family: str, quick: bool) -> str:
    """cpu-embedded (scenes), cpu-embedded-patterns, cuda-tiny-quick, ..."""
    return f"{torch.device(device).type}-{models_tag(models, family, quick)}"
