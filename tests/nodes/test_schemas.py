"""Every node's schema: literal pack-prefixed ids, one category root, tooltips everywhere."""
import asyncio
import concurrent.futures
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {
    "MuLoSDLoadTarget": "Load Target",
    "MuLoSDLoadDrafter": "Load Drafter",
    "MuLoSDSelfDrafter": "Self Drafter",
    "MuLoSDLoadTextEncoder": "Load Text Encoder",
    "MuLoSDTextPrompt": "MuLo-SD Text Prompt",
    "MuLoSDLoadJanus": "Load Janus-Pro",
    "MuLoSDJanusPrompt": "Janus Prompt",
    "MuLoSDUpsampler": "Upsampler",
    "MuLoSDLocalVerifier": "Local Verifier",
    "MuLoSDSampler": "MuLo-SD Sampler",
    "MuLoSDARSampler": "AR Sampler",
}
CUSTOM = {"MULOSD_MODEL", "MULOSD_UPSAMPLER", "MULOSD_VERIFIER", "MULOSD_TEXT_ENCODER", "MULOSD_CONDITIONING"}


def schemas(pack):
    return {cls.GET_SCHEMA().node_id: (cls, cls.GET_SCHEMA()) for cls in pack.NODES}


def test_extension_lists_every_node(pack):
    # in a worker thread: Playwright's sync API (browser tests earlier in the session) can leave an
    # event loop running in the main thread, where asyncio.run refuses to start
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        nodes = pool.submit(asyncio.run, pack.MuLoSDExtension().get_node_list()).result()
    assert {cls.GET_SCHEMA().node_id for cls in nodes} == set(EXPECTED)


def test_ids_display_names_categories_descriptions(pack):
    for node_id, (cls, schema) in schemas(pack).items():
        assert schema.display_name == EXPECTED[node_id]
        assert schema.category.startswith("MuLo-SD/"), schema.category
        assert len(schema.description) > 40, node_id
        assert cls.__name__ == node_id


def test_node_ids_are_string_literals_in_the_source():
    """The Manager's scanner reads node ids as literals; none may be computed."""
    src = "".join(p.read_text() for p in (ROOT / "nodes").glob("*.py"))
    assert set(re.findall(r'node_id="(MuLoSD\w+)"', src)) == set(EXPECTED)


@pytest.mark.parametrize("node_id", sorted(EXPECTED))
def test_every_input_and_output_has_a_tooltip(pack, node_id):
    cls, schema = schemas(pack)[node_id]
    for i in schema.inputs:
        assert i.tooltip and len(i.tooltip) > 10, f"{node_id}.{i.id} has no tooltip"
    for o in schema.outputs:
        assert o.tooltip and len(o.tooltip) > 10, f"{node_id} output {o.id} has no tooltip"
        assert o.display_name, f"{node_id} output {o.id} has no name"
    info = cls.GET_NODE_INFO_V1()  # what /object_info serves
    assert info["name"] == node_id and all(info["output_tooltips"])
    for section in info["input"].values():
        for name, spec in section.items():
            assert spec[1].get("tooltip"), f"{node_id}.{name}"


def test_custom_types_have_one_spelling(pack):
    seen = set()
    for _, schema in schemas(pack).values():
        for io_ in list(schema.inputs) + list(schema.outputs):
            t = str(io_.io_type)
            if t.startswith("MULOSD"):
                seen.add(t)
    assert seen == CUSTOM


def test_numeric_inputs_declare_ranges(pack):
    for node_id, (_, schema) in schemas(pack).items():
        for i in schema.inputs:
            if str(i.io_type) in ("INT", "FLOAT"):
                assert i.min is not None and i.max is not None and i.default is not None, f"{node_id}.{i.id}"
                assert i.min <= i.default <= i.max, f"{node_id}.{i.id}"


def test_seed_widgets_control_after_generate(pack):
    for node_id in ("MuLoSDSampler", "MuLoSDARSampler"):
        seed = next(i for i in schemas(pack)[node_id][1].inputs if i.id == "seed")
        assert seed.control_after_generate is True


def test_root_init_registers_through_comfy_entrypoint():
    init = (ROOT / "__init__.py").read_text()
    assert "async def comfy_entrypoint" in init
    assert "NODE_CLASS_MAPPINGS" not in init  # one registration style (ComfyUI uses only the first)
    assert not re.search(r"^\s*(import|from)\s+comfy", init, re.MULTILINE)  # importable without ComfyUI


@pytest.mark.parametrize("node_id", sorted(EXPECTED))
def test_execute_fallbacks_equal_the_schema_defaults(pack, node_id):
    """A graph saved without an input runs what the widget would show: every default of execute() is the
    schema's default for that input, and None only stands for an optional input left unconnected."""
    import inspect

    cls, schema = schemas(pack)[node_id]
    inputs = {i.id: i for i in schema.inputs}
    params = inspect.signature(cls.execute).parameters
    assert set(params) - {"cls"} == set(inputs), node_id
    for name, p in params.items():
        if p.default is inspect.Parameter.empty:
            continue
        i = inputs[name]
        if p.default is None:
            assert i.optional, f"{node_id}.{name}: falls back to None but is not optional"
        else:
            assert p.default == getattr(i, "default", None), f"{node_id}.{name}: execute falls back to {p.default!r}, schema says {getattr(i, 'default', None)!r}"


def test_unconnected_components_equal_the_component_nodes_at_their_defaults(pack, tiny_models, monkeypatch):
    """The MuLo-SD Sampler without an Upsampler runs what that node gives at its defaults; without a Local
    Verifier, the target family's shipped settings, which are the Local Verifier's defaults for the default
    family (real models and the tiny card-less ones here get the paper's)."""
    from mulosd_pack.nodes import samplers
    from mulosd_pack.nodes.components import MuLoSDLocalVerifier, MuLoSDUpsampler
    from mulosd_pack.nodes.loaders import load

    def at_defaults(cls):
        return cls.execute(**{i.id: i.default for i in cls.GET_SCHEMA().inputs}).result[0]
    seen = {}

    class Stop(Exception):
        pass

    def generate(target, cond, sampling, method, *args, **kw):   # record the method, run nothing
        seen["method"] = method
        raise Stop
    monkeypatch.setattr(samplers, "generate", generate)
    drafter, target = (load(f"embedded/{n}.safetensors", "auto", 0, "cpu", "float32") for n in ("drafter", "target"))
    widgets = {i.id: i.default for i in samplers.MuLoSDSampler.GET_SCHEMA().inputs if getattr(i, "default", None) is not None}
    with pytest.raises(Stop):
        samplers.MuLoSDSampler.execute(drafter, target, **widgets)
    from mulosd_core import presets
    assert seen["method"].verifier == presets.mulo_verifier(presets.model_family(target.model))
    assert presets.mulo_verifier("scenes") == at_defaults(MuLoSDLocalVerifier)
    monkeypatch.setattr(target.model, "family", "patterns")   # the loaders cache the model: undo after
    with pytest.raises(Stop):
        samplers.MuLoSDSampler.execute(drafter, target, **widgets)
    assert seen["method"].verifier == presets.mulo_verifier("patterns")
    assert seen["method"].upsampler == at_defaults(MuLoSDUpsampler)
