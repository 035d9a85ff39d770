"""Input checks ComfyUI 0.3.75 leaves to a pack: whole numbers for INT inputs, finite numbers for FLOAT
inputs, combo values among their options. Every error names the input as the graph shows it and
what it accepts.

ComfyUI converts an INT input with int() before any node sees it, so a class_id of 2.5 sent over
the API would silently run as class 2. The pack's prompt handler (ComfyUI's on_prompt hook, run
on every POST /prompt before validation) swaps such a value for a `Refused` number whose int() or
float() raises the pack's message: ComfyUI's own validation then refuses the prompt with HTTP 400,
an `invalid_input_type` error on that input, and the prompt never runs. Combo values (which 0.3.75
does not check for V3 nodes) are checked by `check_choices` when the node runs, before any model.
"""
from __future__ import annotations

import logging
import math
import sys

from comfy_api.latest import io

log = logging.getLogger("mulosd.nodes")


class Refused(float):
    """A number an input must not take: it serialises as itself (the error echoes the value sent), and
    converting it as ComfyUI does (int() for INT, float() for FLOAT) raises `message`."""

    message: str

    def __new__(cls, value: float, message: str) -> "Refused":
        obj = super().__new__(cls, value)
        obj.message = message
        return obj

    def __int__(self) -> int:
        raise ValueError(self.message)

    def __float__(self) -> float:
        raise ValueError(self.message)


def _inputs(node_cls) -> list:
    schema = node_cls.define_schema()
    return list(schema.inputs)


def _range(inp) -> str:
    lo, hi = getattr(inp, "min", None), getattr(inp, "max", None)
    if lo is not None and hi is not None:
        return f" from {lo} to {hi}"
    return f" >= {lo}" if lo is not None else (f" <= {hi}" if hi is not None else "")


def number_inputs(node_cls) -> list:
    """The node's INT and FLOAT inputs (their schema entries)."""
    return [inp for inp in _inputs(node_cls) if isinstance(inp, (io.Int.Input, io.Float.Input))]


def number_problems(numbers: list, inputs: dict) -> dict[str, str]:
    """{input name: message} for INT inputs given a non-whole number and FLOAT inputs given NaN or infinity
    (`numbers`: a node's `number_inputs`, `inputs`: its inputs in an API prompt)."""
    out = {}
    for inp in numbers:
        value = inputs.get(inp.id)
        if not isinstance(value, float) or isinstance(value, Refused):
            continue
        if isinstance(inp, io.Int.Input) and not value.is_integer():
            out[inp.id] = f"{inp.id}: expected a whole number{_range(inp)}, got {value!r}"
        elif isinstance(inp, io.Float.Input) and not math.isfinite(value):
            out[inp.id] = f"{inp.id}: expected a finite number{_range(inp)}, got {value!r}"
    return out


def refuse_bad_numbers(json_data: dict, numbers: dict[str, list]) -> dict:
    """ComfyUI on_prompt handler: mark bad numbers of the pack's nodes (`numbers`: node id -> its
    `number_inputs`) so that ComfyUI's validation refuses them."""
    prompt = json_data.get("prompt") if isinstance(json_data, dict) else None
    if not isinstance(prompt, dict):
        return json_data
    for node in prompt.values():
        spec = numbers.get(node.get("class_type")) if isinstance(node, dict) else None
        inputs = node.get("inputs") if spec else None
        if not isinstance(inputs, dict):
            continue
        for name, message in number_problems(spec, inputs).items():
            inputs[name] = Refused(inputs[name], message)
    return json_data


def register_prompt_check(nodes: list[type]) -> bool:
    """Install `refuse_bad_numbers` for these node classes on the running server (once); False without one."""
    server = sys.modules.get("server")
    instance = getattr(getattr(server, "PromptServer", None), "instance", None)
    if instance is None or not hasattr(instance, "add_on_prompt_handler"):
        return False
    numbers = {n.define_schema().node_id: number_inputs(n) for n in nodes}

    def mulosd_refuse_bad_numbers(json_data):
        return refuse_bad_numbers(json_data, numbers)

    handlers = getattr(instance, "on_prompt_handlers", [])
    if any(getattr(h, "__name__", "") == mulosd_refuse_bad_numbers.__name__ for h in handlers):
        return True
    instance.add_on_prompt_handler(mulosd_refuse_bad_numbers)
    log.info("MuLo-SD: prompt check installed (INT inputs take whole numbers, FLOAT inputs finite ones)")
    return True


def check_choices(node_cls, **values) -> None:
    """Raise ValueError naming the first combo input whose value is not among the schema's options."""
    combos = {inp.id: inp for inp in _inputs(node_cls) if isinstance(inp, io.Combo.Input)}
    for name, value in values.items():
        options = list(combos[name].options or [])
        if value not in options:
            raise ValueError(f"{name}: expected one of {options}, got {value!r}")
