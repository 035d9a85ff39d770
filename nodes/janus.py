"""Load Janus-Pro and Janus Prompt: a local Janus-Pro folder -> MULOSD_MODEL; a prompt -> MULOSD_CONDITIONING.

A Janus-Pro model is a HuggingFace-format folder (config.json with model_type "janus",
safetensors weights, tokenizer and processor files), as deepseek-community/Janus-Pro-1B and
-7B ship. Folders are listed from ComfyUI's model folder "mulosd" (ComfyUI/models/mulosd,
any `mulosd:` entry of extra_model_paths.yaml) up to three levels deep; the convention is
ComfyUI/models/mulosd/janus/<name>/, listed as "janus/<name>". Nothing is downloaded. Loading
the same folder with the same settings again reuses the loaded model.

Janus-Pro formats and tokenises its prompt itself (a chat turn, then the image-start token),
so the Janus Prompt node only carries the text, on the same MULOSD_CONDITIONING socket as the
LlamaGen Text Prompt: the samplers' inputs stay as they are, and each model (drafter and
target) formats the one prompt with its own processor when the sampler runs.
"""
from __future__ import annotations

import logging

import folder_paths
from comfy_api.latest import io

from mulosd_core.api import (DEFAULT_MAX_PROMPT_TOKENS, DEFAULT_WEIGHT_MODE, JanusModel, check_weight_mode, load_device,
                             load_janus, place_weights, weights_report)

from .folders import folder_stamp, model_folders
from .loaders import FOLDER, ModelCache, device_options, resolve_device, weights_input
from .text import DTYPE_OPTIONS, resolve_dtype, validate_prompt
from .types import JanusPrompt, ModelHandle, MulosdConditioning, MulosdModel

log = logging.getLogger("mulosd.nodes")

SUBFOLDER = "janus"    # ComfyUI/models/mulosd/janus/Janus-Pro-7B
DEFAULT_MODEL = f"{SUBFOLDER}/Janus-Pro-7B"
CACHE_SIZE = 2         # a drafter and a target
_models = ModelCache(CACHE_SIZE)
# the text-to-image example of Janus-Pro's README
EXAMPLE_PROMPT = "A stunning princess from kabul in red, white traditional clothing, blue eyes, brown hair"


def janus_folders() -> dict[str, str]:
    """Listed name -> full path of every Janus folder (config.json with model_type "janus") under the mulosd folders."""
    return model_folders((FOLDER,), ("janus",))


def _missing(name, folders: dict) -> str:
    return (f"model_name: expected one of the {len(folders)} Janus-Pro folders (a folder with a config.json of "
            f"model_type 'janus', safetensors weights and processor files, e.g. ComfyUI/models/mulosd/{DEFAULT_MODEL}) "
            f"in the mulosd model folders {folder_paths.get_folder_paths(FOLDER)}, got {name!r}")


def load(model_name: str, device: str, dtype: str, weights: str = DEFAULT_WEIGHT_MODE) -> ModelHandle:
    """The cached load behind Load Janus-Pro."""
    folders = janus_folders()
    if model_name not in folders:
        raise ValueError(_missing(model_name, folders))
    path, dev = folders[model_name], resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    check_weight_mode(weights)
    key = (folder_stamp(path), str(dev), dt, weights)
    model = _models.get(key, lambda: _load_model(model_name, path, dev, dt, weights))
    return ModelHandle(model, model_name, path, path)


def _load_model(model_name: str, path: str, dev, dt, weights: str) -> JanusModel:
    model = load_janus(path, load_device(weights, dev), dt, name=model_name)
    place_weights(model, dev, weights)
    log.info("MuLo-SD: loaded Janus-Pro %s (%s) on %s; %s", model_name, dt, dev, weights_report(model))
    return model


def check_prompt(prompt) -> None:
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"prompt: expected a prompt for Janus-Pro (non-empty text; use cfg, not an empty prompt, for "
                         f"unconditional guidance), got {prompt!r}")


class MuLoSDLoadJanus(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        names = list(janus_folders())
        default = DEFAULT_MODEL if DEFAULT_MODEL in names else (names[0] if names else None)
        return io.Schema(
            node_id="MuLoSDLoadJanus", display_name="Load Janus-Pro", category="MuLo-SD/loaders",
            description="Loads a Janus-Pro model (text-to-image, 384 px, 24x24 tokens) from a local HuggingFace-format "
                        "folder in ComfyUI/models/mulosd/janus/. Use it for the target and, with a second loader, for "
                        "the drafter: Janus-Pro-1B drafts for Janus-Pro-7B at the same resolution (r = 1). Prompts "
                        "come from a Janus Prompt node.",
            inputs=[
                io.Combo.Input("model_name", options=names, default=default,
                               tooltip="A Janus-Pro folder (config.json, safetensors weights, tokenizer and processor "
                                       "files, e.g. deepseek-community/Janus-Pro-7B) under ComfyUI/models/mulosd, "
                                       "by convention mulosd/janus/Janus-Pro-7B and mulosd/janus/Janus-Pro-1B."),
                io.Combo.Input("device", options=device_options(), default="auto",
                               tooltip="Where the model runs; auto = ComfyUI's compute device (honours --cpu)."),
                io.Combo.Input("dtype", options=DTYPE_OPTIONS, default="auto",
                               tooltip="Weight precision; auto = bfloat16 on CUDA GPUs (as Janus-Pro generates), else "
                                       "float32. A 7B model needs about 15 GB in bfloat16."),
                weights_input(),
            ],
            outputs=[MulosdModel.Output("model", display_name="model",
                                        tooltip="The loaded Janus-Pro model, for the target or drafter input of the "
                                                "samplers.")],
        )

    @classmethod
    def validate_inputs(cls, model_name=None) -> bool | str:
        """ComfyUI 0.3.75 does not check V3 combo values itself: name the missing folder before anything runs."""
        if model_name is None:
            return True
        folders = janus_folders()
        return True if model_name in folders else _missing(model_name, folders)

    @classmethod
    def execute(cls, model_name, device, dtype, weights=DEFAULT_WEIGHT_MODE) -> io.NodeOutput:
        handle = load(model_name, device, dtype, weights)
        return io.NodeOutput(handle, ui={"text": [handle.description]})


class MuLoSDJanusPrompt(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="MuLoSDJanusPrompt", display_name="Janus Prompt", category="MuLo-SD/conditioning",
            description="A prompt for Janus-Pro models. Janus formats it itself (a chat turn followed by the "
                        f"image-start token) and takes up to {DEFAULT_MAX_PROMPT_TOKENS} tokens; connect the output to "
                        "the conditioning input of the MuLo-SD Sampler and the AR Sampler. One prompt serves drafter "
                        "and target.",
            inputs=[
                io.String.Input("prompt", multiline=True, default=EXAMPLE_PROMPT,
                                tooltip=f"What to draw. Must not be empty; at most {DEFAULT_MAX_PROMPT_TOKENS} tokens "
                                        "once chat-formatted."),
            ],
            outputs=[MulosdConditioning.Output("conditioning", display_name="conditioning",
                                               tooltip="The prompt, for the samplers' conditioning input (Janus-Pro "
                                                       "models only).")],
        )

    @classmethod
    def validate_inputs(cls, prompt=None) -> bool | str:
        return validate_prompt(check_prompt, prompt)

    @classmethod
    def execute(cls, prompt: str) -> io.NodeOutput:
        check_prompt(prompt)
        return io.NodeOutput(JanusPrompt(prompt))
