"""MuLo-SD Sampler and AR Sampler: class-conditional generation through mulosd_core.engine.

Both return images, acceptance maps and a statistics string (JSON):

    method, batch, tokens (grid^2 per image), target_calls, drafter_calls, drafted,
    accepted, resampled, steps, largest_island (per step), seconds {total, draft, verify,
    ...}, peak_memory_bytes, tokens_per_target_call, acceptance_rate, resampled_fraction
    (mulosd_core.stats.RunStats), plus sampler, target, drafter, ratio, grid, image_size,
    class_id, seed, sampling {cfg_scale, temperature, top_k, top_p} and config (the
    engine's MethodConfig).

Map colours: green accepted draft, red rejected, yellow resampled neighbour, blue
sampled by the target alone.
"""
from __future__ import annotations

import json

import comfy.model_management
import torch
import torch.nn.functional as F
from comfy_api.latest import io

from mulosd_core import presets
from mulosd_core.engine import MethodConfig, VerifierConfig, check_pair, generate
from mulosd_core.sampling import SamplingConfig
from mulosd_core.upsample import UpsamplerConfig, resolution_ratio

from .progress import StepProgress
from .types import ModelHandle, MulosdModel, MulosdUpsampler, MulosdVerifier

MAX_SEED = 0xFFFFFFFFFFFFFFFF


def sampling_inputs() -> list:
    d = SamplingConfig()
    return [
        io.Int.Input("class_id", default=0, min=0, max=100_000,
                     tooltip="The class to draw (class-conditional models); must be below the target's class count "
                             "(embedded models: 0-9, ImageNet models: 0-999)."),
        io.Int.Input("seed", default=0, min=0, max=MAX_SEED, control_after_generate=True,
                     tooltip="Random seed; image b of a batch uses seed + b, so batches reproduce single runs."),
        io.Float.Input("cfg", default=d.cfg_scale, min=0.0, max=30.0, step=0.1,
                       tooltip="Classifier-free guidance scale on the logits; 1 or less turns guidance off."),
        io.Float.Input("temperature", default=d.temperature, min=0.0, max=5.0, step=0.05,
                       tooltip="Softmax temperature; 0 = greedy (argmax)."),
        io.Int.Input("top_k", default=d.top_k, min=0, max=1_000_000,
                     tooltip="Keep only the k most likely tokens; 0 = off."),
        io.Float.Input("top_p", default=d.top_p, min=0.01, max=1.0, step=0.01,
                       tooltip="Nucleus sampling: keep the most likely tokens up to this probability mass; 1 = off."),
    ]


OUTPUTS = [
    io.Image.Output("images", display_name="images", tooltip="The generated images, [B, H, W, 3] in 0..1."),
    io.Image.Output("acceptance_maps", display_name="acceptance_maps",
                    tooltip="Per token: green accepted draft, red rejected, yellow resampled neighbour, blue sampled by "
                            "the target alone; enlarged to the image size."),
    io.String.Output("statistics", display_name="statistics",
                     tooltip="JSON: target/drafter calls, tokens per target call, acceptance rate, resampled fraction, "
                             "timings and the settings used (see the README's Nodes section)."),
]


def class_ids(target: ModelHandle, class_id: int, batch_size: int) -> torch.Tensor:
    m = target.model
    if m.model_type != "c2i":
        raise ValueError(f"target: expected a class-conditional (c2i) model, got {target.name}, a {m.model_type} model; "
                         "text-to-image needs caption conditioning, which these nodes do not provide yet")
    if not 0 <= class_id < m.num_classes:
        raise ValueError(f"class_id: expected 0..{m.num_classes - 1} ({target.name} has {m.num_classes} classes), got {class_id}")
    return torch.full((batch_size,), class_id, dtype=torch.long)


def to_image(x: torch.Tensor) -> torch.Tensor:
    """[B, 3, H, W] -> ComfyUI IMAGE [B, H, W, 3] float32 in 0..1 on the intermediate device."""
    return x.float().clamp(0, 1).permute(0, 2, 3, 1).contiguous().to(comfy.model_management.intermediate_device())


def outputs(result, target: ModelHandle, info: dict, method: MethodConfig, sampling: SamplingConfig) -> io.NodeOutput:
    m = target.model
    maps = F.interpolate(result.maps.float(), size=tuple(result.images.shape[-2:]), mode="nearest")
    stats = {**result.stats.to_dict(), **info, "grid": m.grid, "image_size": m.image_size,
             "sampling": sampling.to_dict(), "config": method.to_dict()}
    return io.NodeOutput(to_image(result.images), to_image(maps), json.dumps(stats, indent=1))


class MuLoSDSampler(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="MuLoSDSampler", display_name="MuLo-SD Sampler", category="MuLo-SD/sampling",
            description="Multi-Scale Local Speculative Decoding: the drafter proposes rows of tokens at its resolution, "
                        "the upsampler lifts them to the target's grid, the target verifies a whole chunk in one call, "
                        "keeps what it accepts and resamples only the rejected regions.",
            inputs=[
                MulosdModel.Input("drafter", tooltip="The drafter (Load Drafter); shares the target's VQ tokenizer, at the "
                                                     "same or an integer-fraction resolution."),
                MulosdModel.Input("target", tooltip="The target (Load Target); its distribution is the one sampled."),
                MulosdUpsampler.Input("upsampler", optional=True,
                                      tooltip="Upsampler settings; unconnected = pixel route with a bicubic filter."),
                MulosdVerifier.Input("verifier", optional=True,
                                     tooltip="Local Verifier settings; unconnected = MuLo-SD's shipped defaults."),
                *sampling_inputs(),
                io.Int.Input("parallel_window", default=presets.MULO_WINDOW, min=0, max=64,
                             tooltip="Low-resolution drafter only: ZipAR-style parallel drafting, the next row starts "
                                     "this many tokens behind the previous one; 0 = sequential drafting."),
                io.Int.Input("rows_per_step", default=presets.MULO_ROWS, min=1, max=64,
                             tooltip="Drafter token rows proposed and verified per step."),
                io.Int.Input("draft_length", default=4, min=0, max=4096,
                             tooltip="Same-resolution drafter only (SD, LANTERN): tokens drafted per step; 0 = whole rows."),
                io.Int.Input("batch_size", default=1, min=1, max=64, tooltip="Images per run (image b uses seed + b)."),
            ],
            outputs=OUTPUTS,
        )

    @classmethod
    def execute(cls, drafter: ModelHandle, target: ModelHandle, class_id, seed, cfg, temperature, top_k, top_p,
                parallel_window, rows_per_step, draft_length, batch_size,
                upsampler: UpsamplerConfig | None = None, verifier: VerifierConfig | None = None) -> io.NodeOutput:
        cond = class_ids(target, class_id, batch_size)
        sampling = SamplingConfig(cfg_scale=cfg, temperature=temperature, top_k=top_k, top_p=top_p)
        try:
            r = resolution_ratio(target.model.grid, drafter.model.grid)
        except ValueError as e:
            raise ValueError(f"drafter: {e}") from None
        method = MethodConfig(verifier=verifier or presets.mulo_verifier(), upsampler=upsampler or UpsamplerConfig(),
                              rows_per_step=rows_per_step, parallel_window=parallel_window if r > 1 else 0,
                              draft_len=draft_length if r == 1 else 0)
        try:
            check_pair(target.model, drafter.model, method)
        except ValueError as e:
            raise ValueError(f"drafter/target: {e}") from None
        result = generate(target.model, cond, sampling, method, drafter.model, seed=seed, progress=StepProgress(target.model))
        info = {"sampler": "MuLo-SD", "target": target.name, "drafter": drafter.name, "ratio": r, "class_id": class_id, "seed": seed}
        return outputs(result, target, info, method, sampling)


class MuLoSDARSampler(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="MuLoSDARSampler", display_name="AR Sampler", category="MuLo-SD/sampling",
            description="Target-only baselines: plain autoregressive sampling (one target call per token), ZipAR "
                        "(next-set decoding over rows) and speculative Jacobi decoding. The reference MuLo-SD is "
                        "measured against.",
            inputs=[
                MulosdModel.Input("target", tooltip="The model to sample (Load Target)."),
                *sampling_inputs(),
                io.Int.Input("batch_size", default=1, min=1, max=64, tooltip="Images per run (image b uses seed + b)."),
                io.Combo.Input("mode", options=["ar", "zipar", "sjd"], default="ar",
                               tooltip="ar: one token per call; zipar: next-set decoding, rows start zipar_window tokens "
                                       "apart; sjd: speculative Jacobi decoding over a window of sjd_window tokens."),
                io.Int.Input("zipar_window", default=8, min=1, max=1024,
                             tooltip="zipar mode: tokens a row runs ahead of the next before the next row starts."),
                io.Int.Input("sjd_window", default=16, min=1, max=1024,
                             tooltip="sjd mode: tokens drafted and verified together per Jacobi iteration."),
            ],
            outputs=OUTPUTS,
        )

    @classmethod
    def execute(cls, target: ModelHandle, class_id, seed, cfg, temperature, top_k, top_p, batch_size, mode,
                zipar_window, sjd_window) -> io.NodeOutput:
        cond = class_ids(target, class_id, batch_size)
        sampling = SamplingConfig(cfg_scale=cfg, temperature=temperature, top_k=top_k, top_p=top_p)
        method = MethodConfig(method=mode, zipar_window=zipar_window, sjd_window=sjd_window)
        result = generate(target.model, cond, sampling, method, seed=seed, progress=StepProgress(target.model))
        info = {"sampler": "AR", "target": target.name, "drafter": None, "ratio": None, "class_id": class_id, "seed": seed}
        return outputs(result, target, info, method, sampling)
