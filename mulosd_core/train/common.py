"""What every training stage of the embedded family shares: the data seed, the learning-rate
schedule, progress lines, resumable state and the model cards (with the command that reproduces them).

train/family.py runs the stages in order; train/upsampler.py (and family's own VQ and GPT stages)
use these, so neither trainer imports the other's internals.
"""
from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from pathlib import Path

import torch

log = logging.getLogger("mulosd.train")

DATA_SEED = 1234
PACK_ROOT = Path(__file__).resolve().parents[2]


def base_folder(base: str) -> Path:
    """A preset's base family folder (a family card's "base"), relative to the pack's root unless absolute."""
    path = Path(base)
    return path if path.is_absolute() else PACK_ROOT / path
COMMAND_ENV = "MULOSD_TRAIN_COMMAND"


class Progress:
    """Logs a progress line with loss and ETA every `every` steps (no extra dependency)."""

    def __init__(self, stage: str, total: int, start: int, every: int = 50) -> None:
        self.stage, self.total, self.start, self.every, self.t0 = stage, total, start, every, time.perf_counter()

    def __call__(self, step: int, **values: float) -> None:
        if step % self.every and step != self.total:
            return
        done = step - self.start
        rate = done / max(time.perf_counter() - self.t0, 1e-9)
        eta = (self.total - step) / max(rate, 1e-9)
        vals = " ".join(f"{k}={v:.4f}" for k, v in values.items())
        log.info("[%s] %d/%d %s (%.2f it/s, eta %.0fs)", self.stage, step, self.total, vals, rate, eta)


def cosine_lr(step: int, total: int, peak: float, warmup: int = 50) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


def resume_path(work: Path, stage: str) -> Path:
    return work / f"{stage}.resume.pt"


def save_resume(work: Path, stage: str, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int, extra: dict) -> None:
    tmp = resume_path(work, stage).with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": torch.tensor(step), **extra}, tmp)
    os.replace(tmp, resume_path(work, stage))


def load_resume(work: Path, stage: str, model: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple[int, dict]:
    p = resume_path(work, stage)
    if not p.exists():
        return 0, {}
    state = torch.load(p, map_location="cpu", weights_only=True)
    model.load_state_dict(state.pop("model"))
    opt.load_state_dict(state.pop("opt"))
    step = int(state.pop("step"))
    log.info("[%s] resuming at step %d", stage, step)
    return step, state


def write_card(out: Path, name: str, card: dict) -> None:
    (out / f"{name}.json").write_text(json.dumps(card, indent=2, sort_keys=True))


def reproduce_command() -> str:
    """The command a card records: the user's, also in the second process that `--jobs 2` starts."""
    return os.environ.get(COMMAND_ENV) or "python -m mulosd_core.train.family " + " ".join(sys.argv[1:])
