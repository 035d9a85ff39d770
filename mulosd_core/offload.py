"""Weight streaming: a model's transformer blocks wait on the CPU and visit the GPU one at a time.

MuLo-SD needs two models at once. When the GPU holds only one of them, the bigger one can
stream: its blocks (almost all of a GPT's weights: 94% for LlamaGen-XL, 96% for XXL) stay in CPU memory
and each is copied to the compute device just before it runs and dropped right after. The
embeddings, final norm and head stay on the device, so `model.device` still names where
the model computes and its KV cache still lives there. The weights' share of GPU memory
falls to those parts plus one block.

The price is one copy of every block per forward call. That suits MuLo-SD's target, which
verifies a whole chunk per call and is called a few times per row, better than an AR
sampler's call per token; streaming the small drafter instead is rarely worth it.

`choose_weights` is the policy, `stream_weights` / `resident_weights` apply it; the loader
nodes expose it as their `weights` input.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch
from torch import nn

from .memory import available_bytes
from .models.protocol import ImageARModel

WEIGHT_MODES = ("auto", "on device", "stream from cpu")
DEFAULT_WEIGHT_MODE = "auto"   # the loaders' default: stream only what would not fit
RESERVE_FRACTION = 0.25   # auto keeps this share of free memory for caches, logits and the other model


def module_bytes(module: nn.Module) -> int:
    """Bytes of a module's parameters and buffers."""
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def check_weight_mode(mode: str) -> None:
    """Name a bad `weights` input before anything loads."""
    if mode not in WEIGHT_MODES:
        raise ValueError(f"weights: expected one of {list(WEIGHT_MODES)}, got {mode!r}")


def choose_weights(mode: str, device: torch.device, weight_bytes: int, free_bytes: Optional[int]) -> str:
    """'resident' or 'stream' for a model of `weight_bytes` about to live on `device`.

    auto streams only on a GPU whose free memory (less a reserve for caches and the other
    model) cannot hold the weights; on the CPU the weights are already where streaming
    would keep them, so every mode is resident there.
    """
    check_weight_mode(mode)
    if device.type == "cpu" or mode == "on device":
        return "resident"
    if mode == "stream from cpu":
        return "stream"
    if free_bytes is None:
        return "resident"
    return "stream" if weight_bytes > free_bytes * (1 - RESERVE_FRACTION) else "resident"


class BlockStreamer:
    """Hooks that fetch a block's weights to `compute` before its forward and drop them after.

    Each parameter and buffer keeps a CPU home tensor (pinned when the compute device is a GPU);
    while its block runs, `.data` points at a fresh copy on the compute device.
    """

    def __init__(self, blocks: list[nn.Module], compute: torch.device,
                 copy: Callable[[torch.Tensor, torch.device], torch.Tensor] | None = None) -> None:
        self.blocks, self.compute = blocks, torch.device(compute)
        self._copy = copy or (lambda t, dev: t.to(dev, non_blocking=True, copy=True))
        self._home: dict[int, torch.Tensor] = {}
        self._live: set[int] = set()
        self._hooks: list = []
        pin = self.compute.type == "cuda" and torch.cuda.is_available()
        for block in blocks:
            for t in self._tensors(block):
                home = t.data.to("cpu")
                self._home[id(t)] = home.pin_memory() if pin else home
                t.data = self._home[id(t)]
            self._hooks.append(block.register_forward_pre_hook(self._fetch_hook))
            self._hooks.append(block.register_forward_hook(self._drop_hook))

    @staticmethod
    def _tensors(block: nn.Module) -> list[torch.Tensor]:
        return [*block.parameters(), *block.buffers()]

    @property
    def block_bytes(self) -> int:
        """The largest block: what streaming adds to the compute device's memory at any moment."""
        return max((module_bytes(b) for b in self.blocks), default=0)

    def _fetch_hook(self, block: nn.Module, args) -> None:
        self.drop_all()  # a block left behind by an exception in an earlier call
        for t in self._tensors(block):
            t.data = self._copy(self._home[id(t)], self.compute)
        self._live.add(id(block))

    def _drop_hook(self, block: nn.Module, args, output) -> None:
        self._drop(block)

    def _drop(self, block: nn.Module) -> None:
        for t in self._tensors(block):
            t.data = self._home[id(t)]
        self._live.discard(id(block))

    def drop_all(self) -> None:
        for block in self.blocks:
            if id(block) in self._live:
                self._drop(block)

    def remove(self) -> None:
        """Undo: hooks off, every block back on the compute device for good."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self.drop_all()
        for block in self.blocks:
            for t in self._tensors(block):
                t.data = self._home[id(t)].to(self.compute)


def is_streamed(model: ImageARModel) -> bool:
    return model.streamer is not None


def stream_weights(model: ImageARModel, compute: torch.device, copy=None) -> BlockStreamer:
    """Move a (CPU-loaded or resident) model to `compute` except its blocks, which stream from the CPU.

    Load such a model on the CPU first: moving a model that does not fit to the GPU would fail
    before streaming could help. Idempotent for the same device.
    """
    compute = torch.device(compute)
    if is_streamed(model):
        if model.streamer.compute == compute:
            return model.streamer
        resident_weights(model)
    blocks = model.weight_blocks()
    keep = {id(t) for b in blocks for t in BlockStreamer._tensors(b)}
    weights = model.weights_module()
    for t in (*weights.parameters(), *weights.buffers()):
        if id(t) not in keep:
            t.data = t.data.to(compute)
    model.streamer = BlockStreamer(blocks, compute, copy)
    return model.streamer


def resident_weights(model: ImageARModel) -> None:
    """Undo `stream_weights`: every weight back on the compute device (no-op when not streamed)."""
    if is_streamed(model):
        model.streamer.remove()
        model.streamer = None


def load_device(mode: str, device: torch.device) -> torch.device:
    """Where to load a model's weights before `place_weights`: the CPU unless they will surely live on `device`."""
    return device if device.type == "cpu" or mode == "on device" else torch.device("cpu")


def place_weights(model: ImageARModel, device: torch.device, mode: str, available=None) -> str:
    """Put a model loaded by `load_device` where `mode` says: 'resident' (all on `device`) or 'stream'.

    `available(device)` gives free memory for auto (memory.available_bytes by default; injectable for tests).
    """
    device = torch.device(device)
    free = (available or available_bytes)(device) if mode == "auto" and device.type != "cpu" else None
    choice = choose_weights(mode, device, module_bytes(model.weights_module()), free)
    if choice == "stream":
        stream_weights(model, device)
    else:
        resident_weights(model)
        model.weights_module().to(device)
    return choice


def weights_report(model: ImageARModel) -> str:
    """One line for the loaders' text output: where the weights live and what they take on the device."""
    total = module_bytes(model.weights_module())
    mb = 1 << 20
    if not is_streamed(model):
        return f"weights {total / mb:.0f} MB on {model.device}"
    s = model.streamer
    blocks = sum(module_bytes(b) for b in s.blocks)
    return (f"weights {total / mb:.0f} MB: {len(s.blocks)} blocks ({blocks / mb:.0f} MB) stream from the cpu, "
            f"{(total - blocks) / mb:.0f} MB + one block ({s.block_bytes / mb:.0f} MB) on {s.compute}")
