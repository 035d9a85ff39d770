"""The MuLo-SD nodes for ComfyUI (V3 schema). The pack's root __init__.py registers them.

    loaders.py     Load Target, Load Drafter,         -> mulosd_core.models.registry
                   Self Drafter                       -> mulosd_core.models.llamagen.self_drafter
    components.py  Upsampler, Local Verifier          -> mulosd_core.upsample / engine configs
    text.py        Load Text Encoder, Text Prompt     -> mulosd_core.models.text_encoder
    janus.py       Load Janus-Pro, Janus Prompt       -> mulosd_core.models.janus
    samplers.py    MuLo-SD Sampler, AR Sampler        -> mulosd_core.api.generate
"""
from __future__ import annotations

from comfy_api.latest import ComfyExtension, io

from .components import MuLoSDLocalVerifier, MuLoSDUpsampler
from .inputs import register_prompt_check
from .janus import MuLoSDJanusPrompt, MuLoSDLoadJanus
from .loaders import MuLoSDLoadDrafter, MuLoSDLoadTarget, MuLoSDSelfDrafter
from .samplers import MuLoSDARSampler, MuLoSDSampler
from .text import MuLoSDLoadTextEncoder, MuLoSDTextPrompt

NODES: list[type[io.ComfyNode]] = [
    MuLoSDLoadTarget, MuLoSDLoadDrafter, MuLoSDSelfDrafter, MuLoSDLoadTextEncoder, MuLoSDTextPrompt, MuLoSDLoadJanus, MuLoSDJanusPrompt,
    MuLoSDUpsampler, MuLoSDLocalVerifier, MuLoSDSampler, MuLoSDARSampler,
]

register_prompt_check(NODES)   # INT inputs refuse non-integers at POST /prompt (nodes/inputs.py); needs a running server


class MuLoSDExtension(ComfyExtension):
    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        return list(NODES)
