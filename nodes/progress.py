"""The engine's progress callback in ComfyUI: progress bar, a preview of the rows so far, cancel.

`mulosd_core.api.generate(..., progress=StepProgress(target))` calls it after every
decoding step (every token row for plain AR). Cancel does not wait for a step: the
samplers also pass ComfyUI's interrupt check as `generate(..., interrupt=...)`, which
the engine calls before every model call. Each progress call honours the interrupt
flag too, before it spends time on a preview. The preview decodes the rows
committed so far of the first image, only when the count changed, and is skipped while
the previews would take longer than the steps between them.
"""
from __future__ import annotations

import time

import comfy.model_management
import comfy.utils
import torch
from comfy.cli_args import args
from PIL import Image

from mulosd_core.api import ImageARModel


class StepProgress:
    def __init__(self, model: ImageARModel, preview: bool = True) -> None:
        self.model, self.preview = model, preview
        self.bar = comfy.utils.ProgressBar(model.num_tokens)
        self.last_done = -1
        self.preview_cost = 0.0           # seconds the last preview took
        self.since = time.perf_counter()  # end of the last preview
        self.previews = 0

    def __call__(self, done: int, total: int, tokens: torch.Tensor) -> None:
        comfy.model_management.throw_exception_if_processing_interrupted()
        image = None
        now = time.perf_counter()
        if self.preview and done != self.last_done and done > 0 and now - self.since >= self.preview_cost:
            image = self.render(done, tokens)
            self.since = time.perf_counter()
            self.preview_cost = self.since - now
        self.last_done = done
        self.bar.update_absolute(done, total, image)

    def render(self, done: int, tokens: torch.Tensor):
        """("JPEG", PIL image, max size) as ComfyUI's preview hook takes it: rows so far, the rest grey."""
        m = self.model
        rows = min(m.grid, -(-done // m.grid))
        with torch.inference_mode():
            part = m.decode(tokens[:1], rows)[0].float().clamp(0, 1).cpu()
        canvas = torch.full((3, m.image_size, m.image_size), 0.5)
        canvas[:, : part.shape[1], : part.shape[2]] = part
        self.previews += 1
        pixels = (canvas.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
        return "JPEG", Image.fromarray(pixels), args.preview_size
