"""MuLo-SD Sampler and AR Sampler: generation through mulosd_core.api.generate.

Class-to-image (c2i) targets take `class_id`; text-to-image (t2i) targets take the
`conditioning` of a MuLo-SD Text Prompt node (caption features + mask, repeated for the
batch); Janus-Pro targets take the `conditioning` of a Janus Prompt node (the prompt as
text, which drafter and target each format themselves). Both return images, acceptance
maps and a statistics string (JSON):

    method, batch, tokens (grid^2 per image), target_calls, drafter_calls, drafted,
    accepted, resampled, steps, waves (resampling calls per step), seconds {total, draft, verify,
    ...}, cache_bytes, peak_memory_bytes (CUDA), tokens_per_target_call, acceptance_rate, resampled_fraction
    (mulosd_core.stats.RunStats), plus sampler, target, drafter, ratio, grid, image_size,
    class_id (c2i) or prompt (t2i, Janus-Pro), seed, sampling {cfg_scale, temperature, top_k,
    top_p} and config (the engine's MethodConfig).

Map colours: green accepted draft, red rejected, yellow resampled neighbour, blue
sampled by the target alone.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

import comfy.model_management
import torch
import torch.nn.functional as F
from comfy_api.latest import io

from mulosd_core.api import (QUALITIES, SHIPPED, SJD_WINDOW, TARGET_ONLY, ZIPAR_WINDOW, MethodConfig, SamplingConfig,
                             UpsamplerConfig, VerifierConfig, generate, resolve)

from .inputs import check_choices
from .progress import StepProgress
from .types import (Conditioning, JanusPrompt, ModelHandle, MulosdConditioning, MulosdModel, MulosdUpsampler,
                    MulosdVerifier)

MAX_SEED = 0xFFFFFFFFFFFFFFFF
AUTO = -1   # a schedule widget at -1 takes the pair's shipped setting (presets.resolve)


def sampling_inputs() -> list:
    d = SamplingConfig()
    return [
        io.Int.Input("class_id", default=0, min=0, max=100_000,
                     tooltip="The class to draw (class-conditional models); must be below the target's class count "
                             "(embedded models: 0-11, ImageNet models: 0-999). Ignored by text-to-image models."),
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


CONDITIONING_INPUT = MulosdConditioning.Input(
    "conditioning", optional=True,
    tooltip="Text-to-image targets only: the prompt from a MuLo-SD Text Prompt node (LlamaGen t2i) or a Janus Prompt "
            "node (Janus-Pro), repeated for the batch. Leave it unconnected for class-conditional targets, which use "
            "class_id.")

OUTPUTS = [
    io.Image.Output("images", display_name="images", tooltip="The generated images, [B, H, W, 3] in 0..1."),
    io.Image.Output("acceptance_maps", display_name="acceptance_maps",
                    tooltip="Per token: green accepted draft, red rejected, yellow resampled neighbour, blue sampled by "
                            "the target alone; enlarged to the image size."),
    io.String.Output("statistics", display_name="statistics",
                     tooltip="JSON: target/drafter calls, tokens per target call, acceptance rate, resampled fraction, "
                             "timings and the settings used (docs/USAGE.md lists every key)."),
]


@dataclass(frozen=True)
class Request:
    """What both samplers parse from their common inputs: condition, caption mask, sampling settings."""

    cond: torch.Tensor | list[str]   # class ids [B] (c2i), caption features [B, T, C] (t2i) or B prompts (Janus-Pro)
    mask: torch.Tensor | None     # caption mask [B, T] (t2i), else None
    sampling: SamplingConfig
    info: dict                       # class_id / prompt / seed, for the statistics


def condition(target: ModelHandle, conditioning: Conditioning | JanusPrompt | None, class_id: int,
              batch_size: int) -> tuple[torch.Tensor | list[str], torch.Tensor | None, dict]:
    """c2i: class ids from class_id; t2i: the caption repeated batch_size times; Janus-Pro: the prompt text repeated
    batch_size times (each model formats it). Here only which node feeds `conditioning` is checked; whether the
    condition fits the models (class range, caption size, prompt length) is checked by generate."""
    m = target.model
    if m.model_type == "c2i":
        if conditioning is not None:
            raise ValueError(f"conditioning: expected nothing for {target.name}, a class-conditional (c2i) model that "
                             f"takes class_id; got the caption {conditioning.prompt!r} (disconnect the text prompt)")
        return torch.full((batch_size,), class_id, dtype=torch.long), None, {"class_id": class_id, "prompt": None}
    if m.model_type == "t2i":
        if conditioning is None:
            raise ValueError(f"conditioning: expected a caption for {target.name}, a text-to-image (t2i) model; got "
                             "nothing (connect Load Text Encoder -> MuLo-SD Text Prompt -> conditioning)")
        if not isinstance(conditioning, Conditioning):
            raise ValueError(f"conditioning: expected T5 caption features from a MuLo-SD Text Prompt node for "
                             f"{target.name}, a LlamaGen text-to-image (t2i) model; got the Janus-Pro prompt "
                             f"{conditioning.prompt!r} of a Janus Prompt node (it feeds Janus-Pro models only)")
        features, mask = conditioning.batch(batch_size)
        return features, mask, {"class_id": None, "prompt": conditioning.prompt}
    if m.model_type == "janus":
        if conditioning is None:
            raise ValueError(f"conditioning: expected a prompt for {target.name}, a Janus-Pro text-to-image model; got "
                             "nothing (connect a Janus Prompt node to conditioning)")
        if not isinstance(conditioning, JanusPrompt):
            raise ValueError(f"conditioning: expected a prompt from a Janus Prompt node for {target.name}, a "
                             f"Janus-Pro model; got T5 caption features of {conditioning.prompt!r} from text encoder "
                             f"{conditioning.encoder} (MuLo-SD Text Prompt feeds LlamaGen t2i models only)")
        return [conditioning.prompt] * batch_size, None, {"class_id": None, "prompt": conditioning.prompt}
    raise ValueError(f"target: expected a c2i, t2i or Janus-Pro model, got {target.name}, a {m.model_type} model")


def parse_request(target: ModelHandle, conditioning: Conditioning | JanusPrompt | None, class_id: int, seed: int,
                  batch_size: int, cfg: float, temperature: float, top_k: int, top_p: float) -> Request:
    cond, mask, info = condition(target, conditioning, class_id, batch_size)
    sampling = SamplingConfig(cfg_scale=cfg, temperature=temperature, top_k=top_k, top_p=top_p)
    return Request(cond, mask, sampling, {**info, "seed": seed})


def to_image(x: torch.Tensor) -> torch.Tensor:
    """[B, 3, H, W] -> ComfyUI IMAGE [B, H, W, 3] float32 in 0..1 on the intermediate device."""
    return x.float().clamp(0, 1).permute(0, 2, 3, 1).contiguous().to(comfy.model_management.intermediate_device())


def run(target: ModelHandle, req: Request, method: MethodConfig, info: dict,
        drafter: ModelHandle | None = None) -> io.NodeOutput:
    """generate() with the node's progress bar and ComfyUI's interrupt checked before every model call, then
    images, enlarged acceptance maps and statistics."""
    m = target.model
    result = generate(m, req.cond, req.sampling, method, drafter.model if drafter else None, seed=req.info["seed"],
                      mask=req.mask, progress=StepProgress(m),
                      interrupt=comfy.model_management.throw_exception_if_processing_interrupted)
    maps = F.interpolate(result.maps.float(), size=tuple(result.images.shape[-2:]), mode="nearest")
    stats = {**result.stats.to_dict(), **info, **req.info, "grid": m.grid, "image_size": m.image_size,
             "sampling": req.sampling.to_dict(), "config": method.to_dict()}
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
                                     tooltip="Local Verifier settings; unconnected = the target family's shipped settings (an "
                                             "embedded family's sweep; the paper's for LlamaGen and Janus-Pro)."),
                CONDITIONING_INPUT,
                *sampling_inputs(),
                io.Int.Input("parallel_window", default=AUTO, min=AUTO, max=64,
                             tooltip="Low-resolution drafter only: ZipAR-style parallel drafting, the next row starts "
                                     "this many tokens behind the previous one; 0 = sequential drafting; -1 = the pair's "
                                     "shipped setting (the statistics' config shows the value used)."),
                io.Int.Input("rows_per_step", default=AUTO, min=AUTO, max=64,
                             tooltip="Drafter token rows proposed and verified per step; -1 = the pair's shipped setting."),
                io.Int.Input("draft_length", default=AUTO, min=AUTO, max=4096,
                             tooltip="Same-resolution drafter only (SD, LANTERN): tokens drafted per step; 0 = whole rows; "
                                     "-1 = the shipped setting."),
                io.Int.Input("batch_size", default=1, min=1, max=64, tooltip="Images per run (image b uses seed + b)."),
                io.Combo.Input("quality", options=list(QUALITIES), default=SHIPPED,
                               tooltip="One choice for the whole method: a preset measured on the target's family "
                                       "(docs/RESULTS.md). shipped = the family's defaults; lossless = the target's "
                                       "own distribution (exact rule, raster rejection, drafts drawn from the learned "
                                       "upsampler); near-lossless = the same test, local rejection; indistinguishable "
                                       "and as good as AR = the fastest setting measured in that quality tier; fastest = "
                                       "the fastest measured, whatever its quality. A connected Upsampler or Local "
                                       "Verifier, and schedule widgets not at -1, override it. A family without that "
                                       "preset (LlamaGen, Janus-Pro) is refused with the list of those it has."),
            ],
            outputs=OUTPUTS,
        )

    @classmethod
    def execute(cls, drafter: ModelHandle, target: ModelHandle, class_id, seed, cfg, temperature, top_k, top_p,
                parallel_window, rows_per_step, draft_length, batch_size, upsampler: UpsamplerConfig | None = None,
                verifier: VerifierConfig | None = None,
                conditioning: Conditioning | JanusPrompt | None = None, quality: str = SHIPPED) -> io.NodeOutput:
        check_choices(cls, quality=quality)
        req = parse_request(target, conditioning, class_id, seed, batch_size, cfg, temperature, top_k, top_p)
        given = lambda v: None if v == AUTO else v
        method = resolve(target.model, drafter.model, verifier=verifier, upsampler=upsampler, quality=quality,
                         rows_per_step=given(rows_per_step), parallel_window=given(parallel_window),
                         draft_len=given(draft_length))
        info = {"sampler": "MuLo-SD", "target": target.name, "drafter": drafter.name,
                "ratio": target.model.grid // drafter.model.grid}
        return run(target, req, method, info, drafter)


class MuLoSDARSampler(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="MuLoSDARSampler", display_name="AR Sampler", category="MuLo-SD/sampling",
            description="Target-only baselines: plain autoregressive sampling (one target call per token), ZipAR "
                        "(next-set decoding over rows), speculative Jacobi decoding and grouped speculative decoding "
                        "(GSD). The reference MuLo-SD is measured against.",
            inputs=[
                MulosdModel.Input("target", tooltip="The model to sample (Load Target)."),
                CONDITIONING_INPUT,
                *sampling_inputs(),
                io.Int.Input("batch_size", default=1, min=1, max=64, tooltip="Images per run (image b uses seed + b)."),
                io.Combo.Input("mode", options=list(TARGET_ONLY), default="ar",
                               tooltip="ar: one token per call; zipar: next-set decoding, rows start zipar_window tokens "
                                       "apart; sjd: speculative Jacobi decoding over a window of sjd_window tokens; gsd: "
                                       "the same window, a draft accepted on the target's mass over a group of similar "
                                       "tokens (grouped speculative decoding)."),
                io.Int.Input("zipar_window", default=ZIPAR_WINDOW, min=1, max=1024,
                             tooltip="zipar mode: tokens a row runs ahead of the next before the next row starts."),
                io.Int.Input("sjd_window", default=SJD_WINDOW, min=1, max=1024,
                             tooltip="sjd and gsd modes: tokens drafted and verified together per Jacobi iteration."),
            ],
            outputs=OUTPUTS,
        )

    @classmethod
    def execute(cls, target: ModelHandle, class_id, seed, cfg, temperature, top_k, top_p, batch_size, mode,
                zipar_window, sjd_window, conditioning: Conditioning | JanusPrompt | None = None) -> io.NodeOutput:
        check_choices(cls, mode=mode)
        req = parse_request(target, conditioning, class_id, seed, batch_size, cfg, temperature, top_k, top_p)
        method = replace(TARGET_ONLY[mode], zipar_window=zipar_window, sjd_window=sjd_window)
        info = {"sampler": "AR", "target": target.name, "drafter": None, "ratio": None}
        return run(target, req, method, info)
