"""Write the example graphs in both formats from one description, so the two never drift.

    python scripts/make_workflows.py          # write example_workflows/*.json and example_workflows/api/*.json
    python scripts/make_workflows.py --check  # exit 1 if the files differ from what it would write

UI format (example_workflows/*.json, drag-and-drop / template browser) and API format
(example_workflows/api/*.json, POST /prompt) come from the same Graph below. ComfyUI lists a
pack's `example_workflows/*.json` (one level deep, so api/ stays out of its template list) and
its frontend shows `<name>.jpg` beside each as the preview. Widget order and socket types come
from the nodes' own schemas (imported with the installed ComfyUI: MULOSD_COMFYUI or
mulosd_core.devenv.comfyui_dir()), so the UI files match what the frontend expects. Preview
images are screenshots written by tests/integration/test_browser.py when
MULOSD_UPDATE_PREVIEWS=1; a graph that has none yet gets a schematic drawn here (node boxes,
titles, widget values and links), which the browser test replaces when previews are refreshed.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mulosd_core import devenv, presets  # noqa: E402  (presets: the shipped defaults the graphs show)
from mulosd_core.models import registry  # noqa: E402

OUT = ROOT / "example_workflows"   # the folder name ComfyUI documents for custom-node templates
PREVIEW = ".jpg"                    # the frontend asks for <name>.jpg (0.3.75's 1.32.9 and 1.58 alike)
WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")

# Core ComfyUI nodes the graphs use: (inputs [(name, type, is_widget)], outputs [(name, type)])
CORE = {
    "SaveImage": ([("images", "IMAGE", False), ("filename_prefix", "STRING", True)], []),
    "PreviewImage": ([("images", "IMAGE", False)], []),
    "PreviewAny": ([("source", "*", False)], []),
}
_ES = registry.card_sampling(registry.embedded_path("target"))[0]   # the default family's card says how it samples
EMBEDDED_SAMPLING = dict(cfg=_ES.cfg_scale, temperature=_ES.temperature, top_k=_ES.top_k, top_p=_ES.top_p)
C2I_SAMPLING = dict(cfg=4.0, temperature=1.0, top_k=2000, top_p=1.0)     # LlamaGen sample_c2i defaults
T2I_SAMPLING = dict(cfg=7.5, temperature=1.0, top_k=1000, top_p=1.0)     # LlamaGen sample_t2i defaults
JANUS_SAMPLING = dict(cfg=5.0, temperature=1.0, top_k=0, top_p=1.0)     # Janus-Pro generation_inference.py defaults
JANUS_PROMPT = "A stunning princess from kabul in red, white traditional clothing, blue eyes, brown hair"  # its README
T2I_PROMPT = ("A portrait photo of a kangaroo wearing an orange hoodie and blue sunglasses standing on the grass in "
              "front of the Sydney Opera House holding a sign on the chest that says Welcome Friends!")  # sample_t2i


def import_nodes():
    """The pack's nodes package with the installed ComfyUI's comfy_api (as tests/nodes/conftest.py does)."""
    comfy = devenv.comfyui_dir()
    if not (comfy / "comfy_api").is_dir():
        sys.exit(f"No ComfyUI at {comfy}; install it with bash scripts/setup_comfyui.sh or set MULOSD_COMFYUI")
    for p in (str(comfy), str(ROOT)):
        if p not in sys.path:
            sys.path.insert(0 if p == str(comfy) else len(sys.path), p)
    import torch
    from comfy.cli_args import args
    if not torch.cuda.is_available():
        args.cpu = True
    if "mulosd_pack" not in sys.modules:
        pkg = types.ModuleType("mulosd_pack")
        pkg.__path__ = [str(ROOT)]
        sys.modules["mulosd_pack"] = pkg
    return importlib.import_module("mulosd_pack.nodes")


def node_specs() -> dict:
    """class_type -> (inputs [(name, type, is_widget, control_after_generate)], outputs [(name, type)])."""
    specs = {k: ([(n, t, w, False) for n, t, w in ins], outs) for k, (ins, outs) in CORE.items()}
    for cls in import_nodes().NODES:
        info = cls.GET_NODE_INFO_V1()
        ins = []
        for section in ("required", "optional"):
            for name in info["input_order"].get(section, []):
                t, opts = info["input"][section][name]
                t = "COMBO" if isinstance(t, list) else str(t)
                ins.append((name, t, t in WIDGET_TYPES and not opts.get("forceInput"), bool(opts.get("control_after_generate"))))
        specs[info["name"]] = (ins, list(zip(info["output_name"], map(str, info["output"]))))
    return specs


@dataclass
class Node:
    id: int
    type: str
    pos: tuple[int, int]
    values: dict = field(default_factory=dict)   # widget name -> value, or input name -> (Node, output slot)
    title: str | None = None

    def __getitem__(self, slot: int) -> tuple[Node, int]:
        return self, slot


class Graph:
    def __init__(self, name: str, note: str) -> None:
        self.name, self.note, self.nodes = name, note, []

    def add(self, type_: str, pos: tuple[int, int], title: str | None = None, **values) -> Node:
        node = Node(len(self.nodes) + 1, type_, pos, values, title)
        self.nodes.append(node)
        return node

    # -- API format ---------------------------------------------------------------------
    def api(self) -> dict:
        out = {}
        for n in self.nodes:
            inputs = {k: ([str(v[0].id), v[1]] if isinstance(v, tuple) else v) for k, v in n.values.items()}
            out[str(n.id)] = {"class_type": n.type, "inputs": inputs, "_meta": {"title": n.title or n.type}}
        return out

    # -- UI format ------------------------------------------------------------------------
    def ui(self, specs: dict) -> dict:
        links, ui_nodes = [], []
        out_links: dict[tuple[int, int], list[int]] = {}
        for n in self.nodes:
            ins, _ = specs[n.type]
            unknown = set(n.values) - {name for name, *_ in ins}
            if unknown:
                raise ValueError(f"{self.name}: {n.type} has no inputs {sorted(unknown)}")
            for slot, (name, t, widget, _) in enumerate([i for i in ins if not i[2]]):
                if name in n.values:
                    src, src_slot = n.values[name]
                    link_id = len(links) + 1
                    links.append([link_id, src.id, src_slot, n.id, slot, specs[src.type][1][src_slot][1]])
                    out_links.setdefault((src.id, src_slot), []).append(link_id)
        link_of = {(l[3], l[4]): l[0] for l in links}
        for order, n in enumerate(self.nodes):
            ins, outs = specs[n.type]
            sockets = [i for i in ins if not i[2]]
            widgets = []
            for name, t, widget, control in ins:
                if widget:
                    if name not in n.values:
                        raise ValueError(f"{self.name}: {n.type} needs a value for {name}")
                    widgets.append(n.values[name])
                    if control:
                        widgets.append("fixed")
            node = {
                "id": n.id, "type": n.type, "pos": list(n.pos), "size": [300, 46 + 24 * (len(widgets) + max(len(sockets), len(outs)))],
                "flags": {}, "order": order, "mode": 0,
                "inputs": [{"name": name, "type": t, "link": link_of.get((n.id, slot))} for slot, (name, t, *_) in enumerate(sockets)],
                "outputs": [{"name": name, "type": t, "links": out_links.get((n.id, slot), []), "slot_index": slot}
                            for slot, (name, t) in enumerate(outs)],
                "properties": {"Node name for S&R": n.type},
                "widgets_values": widgets,
            }
            if n.title:
                node["title"] = n.title
            ui_nodes.append(node)
        return {"last_node_id": len(self.nodes), "last_link_id": len(links), "nodes": ui_nodes, "links": links,
                "groups": [], "config": {}, "extra": {"ds": {"scale": 0.62, "offset": [30, 40]}, "mulosd_note": self.note},
                "version": 0.4}


# ---------------------------------------------------------------------------- the graphs
LOADER = dict(image_size=0, device="auto", dtype="float32", weights="auto")


def verifier_widgets(family: str | None, self_drafting: bool = False) -> dict:
    """The Local Verifier at a family's shipped settings (None: the paper's, for LlamaGen and Janus-Pro)."""
    v = presets.mulo_verifier(family, self_drafting=self_drafting)
    return dict(rule=v.rule, tau=v.tau, k_neighbours=v.k_neighbours, expansion_radius=v.expansion_radius,
                rejection=v.rejection, resampling=v.resampling, lantern_delta=presets.LANTERN_DELTA, recheck=v.recheck,
                recheck_scope=v.recheck_scope)


def drafting_widgets(family: str | None, self_drafting: bool = False) -> dict:
    d = presets.mulo_defaults(family, self_drafting)
    return dict(parallel_window=d.parallel_window, rows_per_step=d.rows_per_step, draft_length=presets.SD_DRAFT_LEN,
                quality=presets.SHIPPED)


VERIFIER, MULO = verifier_widgets("scenes"), drafting_widgets("scenes")   # the embedded graphs' default family
PAPER_VERIFIER, PAPER_MULO = verifier_widgets(None), drafting_widgets(None)   # real models: the paper's settings


def outputs(g: Graph, sampler: Node, x: int, y: int, prefix: str, maps: bool = True) -> None:
    g.add("SaveImage", (x, y), f"{prefix} images", images=sampler[0], filename_prefix=f"MuLoSD/{prefix}")
    if maps:
        g.add("PreviewImage", (x + 320, y), f"{prefix} acceptance map", images=sampler[1])
    g.add("PreviewAny", (x, y + 300), f"{prefix} statistics", source=sampler[2])


def embedded_vs_ar() -> Graph:
    g = Graph("mulosd_embedded_vs_ar", "MuLo-SD and plain AR on the embedded models, same class and seed.")
    target = g.add("MuLoSDLoadTarget", (0, 0), model_name="embedded/target.safetensors", vq_name="auto", **LOADER)
    drafter = g.add("MuLoSDLoadDrafter", (0, 260), model_name="embedded/drafter.safetensors", vq_name="auto", **LOADER)
    return beside_ar(g, target, drafter, 520, VERIFIER, MULO, class_id=2)


def beside_ar(g: Graph, target: Node, drafter: Node, up_y: int, verifier: dict, drafting: dict, class_id: int,
              upsampler: str = "pixel") -> Graph:
    """An upsampler (of kind `upsampler`) and a Local Verifier below the loaders at `up_y`, MuLo-SD and AR on the
    same class and seed (batch 4), and the outputs of both."""
    up = g.add("MuLoSDUpsampler", (0, up_y), kind=upsampler, ratio=0, filter="bicubic", draw=False)
    ver = g.add("MuLoSDLocalVerifier", (0, up_y + 180), **verifier)
    common = dict(class_id=class_id, seed=0, **EMBEDDED_SAMPLING)
    mulo = g.add("MuLoSDSampler", (360, 0), drafter=drafter[0], target=target[0], upsampler=up[0], verifier=ver[0],
                 **common, **drafting, batch_size=4)
    ar = g.add("MuLoSDARSampler", (360, 560), target=target[0], **common, batch_size=4, mode="ar", zipar_window=8, sjd_window=16)
    outputs(g, mulo, 720, 0, "mulo")
    outputs(g, ar, 720, 560, "ar", maps=False)
    return g


def self_drafting() -> Graph:
    g = Graph("mulosd_self_drafting", "Self-drafting: the embedded self_target drafts for itself at 8 x 8 tokens "
                                      "(Self Drafter: no second file is loaded and no weights are added), beside plain "
                                      "AR on the same model, same class and seed.")
    target = g.add("MuLoSDLoadTarget", (0, 0), model_name="embedded/self_target.safetensors", vq_name="auto", **LOADER)
    drafter = g.add("MuLoSDSelfDrafter", (0, 260), target=target[0], ratio=2, layers=0)
    # the learned upsampler: the self-drafting defaults were chosen with it (presets.MULO_DEFAULTS["scenes/self"])
    return beside_ar(g, target, drafter, 420, verifier_widgets("scenes", self_drafting=True),
                     drafting_widgets("scenes", self_drafting=True), class_id=5, upsampler="learned")


def pyramid_128() -> Graph:
    """The 128 px scenes member (32 x 32 tokens) drafted at r = 2 by the 64 px target and at r = 4 by the 8 x 8
    drafter, each through the learned upsampler for its ratio (found by the pair), beside AR on the same class and
    seed (docs/DESIGN.md section 3.8)."""
    g = Graph("mulosd_pyramid_128", "The resolution pyramid of the scenes family: its 128 px target (32 x 32 tokens) "
                                    "drafted by the 64 px target (r = 2) and by the 32 px drafter (r = 4), beside AR. "
                                    "The upsamplers are learned, one per ratio, picked by the pair.")
    target = g.add("MuLoSDLoadTarget", (0, 0), model_name="embedded/scenes128/target.safetensors", vq_name="auto", **LOADER)
    common = dict(class_id=6, seed=0, **EMBEDDED_SAMPLING, **MULO, batch_size=1)
    for row, (r, name) in enumerate(((2, "target"), (4, "drafter"))):
        y = 260 + row * 620
        d = g.add("MuLoSDLoadDrafter", (0, y), f"drafter: r = {r}", model_name=f"embedded/{name}.safetensors",
                  vq_name="auto", **LOADER)
        up = g.add("MuLoSDUpsampler", (0, y + 260), f"upsampler: r = {r}", kind="learned", ratio=r, filter="bicubic", draw=False)
        ver = g.add("MuLoSDLocalVerifier", (360, y), f"verifier: r = {r}", **VERIFIER)
        s = g.add("MuLoSDSampler", (720, y), f"MuLo-SD: r = {r}", drafter=d[0], target=target[0], upsampler=up[0],
                  verifier=ver[0], **common)
        outputs(g, s, 1080, y, f"r{r}")
    ar = g.add("MuLoSDARSampler", (720, 1500), target=target[0], class_id=6, seed=0, **EMBEDDED_SAMPLING, batch_size=1,
               mode="ar", zipar_window=8, sjd_window=16)
    outputs(g, ar, 1080, 1500, "ar", maps=False)
    return g


def ablation() -> Graph:
    # the pooling row flips the default: pooling off (k = 1) when the default pools, else pooling on (k = 16)
    pool = ("no_pooling", {"k_neighbours": 1}) if VERIFIER["k_neighbours"] > 1 else ("pooling_k16", {"k_neighbours": 16})
    what = "pooling off (k = 1)" if VERIFIER["k_neighbours"] > 1 else "pooling on (k = 16; the default has k = 1)"
    g = Graph("mulosd_ablation", f"MuLo-SD with one part changed at a time: {what}, local expansion off "
                                 "(raster rejection), on the embedded models.")
    target = g.add("MuLoSDLoadTarget", (0, 0), model_name="embedded/target.safetensors", vq_name="auto", **LOADER)
    drafter = g.add("MuLoSDLoadDrafter", (0, 260), model_name="embedded/drafter.safetensors", vq_name="auto", **LOADER)
    common = dict(class_id=3, seed=0, **EMBEDDED_SAMPLING, **MULO, batch_size=1)
    variants = [("full", VERIFIER), (pool[0], VERIFIER | pool[1]), ("raster", VERIFIER | {"rejection": "raster"})]
    for row, (name, settings) in enumerate(variants):
        y = row * 470
        ver = g.add("MuLoSDLocalVerifier", (360, y), f"verifier: {name}", **settings)
        s = g.add("MuLoSDSampler", (720, y), f"MuLo-SD: {name}", drafter=drafter[0], target=target[0], verifier=ver[0], **common)
        outputs(g, s, 1080, y, name)
    return g


def llamagen(name: str, note: str, drafter: tuple, target: tuple, vq: str, sampling: dict, class_id: int = 0,
             prompt: str | None = None) -> Graph:
    """A LlamaGen pair; with a prompt (t2i) the samplers take its caption conditioning and ignore class_id."""
    g = Graph(name, note)
    t = g.add("MuLoSDLoadTarget", (0, 0), model_name=target[0], vq_name=vq, image_size=target[1], device="auto", dtype="bfloat16",
              weights="auto")
    d = g.add("MuLoSDLoadDrafter", (0, 260), model_name=drafter[0], vq_name=vq, image_size=drafter[1], device="auto", dtype="bfloat16",
              weights="auto")
    up = g.add("MuLoSDUpsampler", (0, 520), kind="pixel", ratio=2, filter="bicubic", draw=False)
    ver = g.add("MuLoSDLocalVerifier", (0, 700), **PAPER_VERIFIER)
    common = dict(class_id=class_id, seed=0, **sampling)
    if prompt is not None:
        enc = g.add("MuLoSDLoadTextEncoder", (0, 980), encoder_name="flan-t5-xl", device="auto", dtype="auto", offload=True)
        text = g.add("MuLoSDTextPrompt", (0, 1160), text_encoder=enc[0], prompt=prompt)
        common["conditioning"] = text[0]
    mulo = g.add("MuLoSDSampler", (360, 0), drafter=d[0], target=t[0], upsampler=up[0], verifier=ver[0], **common, **PAPER_MULO, batch_size=1)
    ar = g.add("MuLoSDARSampler", (360, 560), target=t[0], **common, batch_size=1, mode="ar", zipar_window=8, sjd_window=16)
    outputs(g, mulo, 720, 0, "mulo")
    outputs(g, ar, 720, 560, "ar", maps=False)
    return g


def janus_pro() -> Graph:
    """Janus-Pro-1B drafts for Janus-Pro-7B at the same resolution (r = 1): no upsampler, whole-token drafts."""
    g = Graph("janus_pro_1b_to_7b", "Janus-Pro: Janus-Pro-1B drafts for Janus-Pro-7B at the same resolution (384 px, "
                                    "24x24 tokens, r = 1; both share one VQ). The two HuggingFace folders "
                                    "(deepseek-community/Janus-Pro-1B and -7B: config.json, safetensors, tokenizer and "
                                    "processor files) go in ComfyUI/models/mulosd/janus/. The prompt is text: each model "
                                    "formats it itself.")
    t = g.add("MuLoSDLoadJanus", (0, 0), "Load Janus-Pro (target)", model_name="janus/Janus-Pro-7B", device="auto",
              dtype="auto", weights="auto")
    d = g.add("MuLoSDLoadJanus", (0, 200), "Load Janus-Pro (drafter)", model_name="janus/Janus-Pro-1B", device="auto",
              dtype="auto", weights="auto")
    text = g.add("MuLoSDJanusPrompt", (0, 400), prompt=JANUS_PROMPT)
    ver = g.add("MuLoSDLocalVerifier", (0, 640), **PAPER_VERIFIER)
    common = dict(class_id=0, seed=0, **JANUS_SAMPLING, conditioning=text[0])
    mulo = g.add("MuLoSDSampler", (360, 0), drafter=d[0], target=t[0], verifier=ver[0], **common,
                 **(PAPER_MULO | {"parallel_window": 0}), batch_size=1)
    ar = g.add("MuLoSDARSampler", (360, 560), target=t[0], **common, batch_size=1, mode="ar", zipar_window=8,
               sjd_window=16)
    outputs(g, mulo, 720, 0, "mulo")
    outputs(g, ar, 720, 560, "ar", maps=False)
    return g


def graphs() -> list[Graph]:
    return [
        embedded_vs_ar(),
        ablation(),
        self_drafting(),
        pyramid_128(),
        llamagen("llamagen_t2i_256_to_512", "LlamaGen t2i XL: the 256 px stage-1 model drafts for the 512 px stage-2 model "
                 "(r = 2) over vq_ds16_t2i.pt, all three in ComfyUI/models/mulosd. The prompt is encoded by FLAN-T5-XL "
                 "(the google/flan-t5-xl folder in ComfyUI/models/text_encoders/flan-t5-xl), which waits on the CPU "
                 "between prompts (offload).",
                 ("t2i_XL_stage1_256.pt", 256), ("t2i_XL_stage2_512.pt", 512), "vq_ds16_t2i.pt", T2I_SAMPLING,
                 prompt=T2I_PROMPT),
        llamagen("llamagen_c2i", "LlamaGen c2i: c2i_L_256 drafts at 192 px (12x12 tokens) for c2i_XL_384 at 384 px "
                 "(24x24), r = 2. Class 207 = golden retriever.",
                 ("c2i_L_256.pt", 192), ("c2i_XL_384.pt", 384), "vq_ds16_c2i.pt", C2I_SAMPLING, 207),
        janus_pro(),
    ]


def render() -> dict[Path, str]:
    specs = node_specs()
    files = {}
    for g in graphs():
        files[OUT / f"{g.name}.json"] = json.dumps(g.ui(specs), indent=1) + "\n"
        files[OUT / "api" / f"{g.name}.json"] = json.dumps(g.api(), indent=1) + "\n"
    return files


# ------------------------------------------------------------------------ schematic previews
CORE_TITLES = {"SaveImage": "Save Image", "PreviewImage": "Preview Image", "PreviewAny": "Preview Any"}


def schematic(g: Graph, specs: dict, size: tuple[int, int] = (800, 500)):
    """A drawing of the UI graph (node boxes with titles and widget values, links), for a graph without a screenshot."""
    from PIL import Image, ImageDraw, ImageFont

    titles = dict(CORE_TITLES)
    titles.update({cls.GET_SCHEMA().node_id: cls.GET_SCHEMA().display_name for cls in import_nodes().NODES})
    ui = g.ui(specs)
    nodes = {n["id"]: n for n in ui["nodes"]}
    head = 30  # title bar height, graph units
    x0 = min(n["pos"][0] for n in nodes.values())
    y0 = min(n["pos"][1] for n in nodes.values()) - head
    x1 = max(n["pos"][0] + n["size"][0] for n in nodes.values())
    y1 = max(n["pos"][1] + n["size"][1] for n in nodes.values())
    ss, pad = 2, 24                                    # drawn at 2x, then reduced (smooth edges and text)
    W, H = size[0] * ss, size[1] * ss
    k = min((W - 2 * pad) / (x1 - x0), (H - 2 * pad) / (y1 - y0))
    ox, oy = (W - k * (x1 - x0)) / 2 - k * x0, (H - k * (y1 - y0)) / 2 - k * y0

    def at(x, y):
        return ox + k * x, oy + k * y

    img = Image.new("RGB", (W, H), (32, 32, 32))
    draw = ImageDraw.Draw(img)
    title_font = ImageFont.load_default(size=max(8, round(17 * k)))
    text_font = ImageFont.load_default(size=max(7, round(14 * k)))
    colours = {"MULOSD_MODEL": (120, 170, 255), "MULOSD_CONDITIONING": (255, 200, 90),
               "MULOSD_VERIFIER": (190, 140, 255), "MULOSD_UPSAMPLER": (120, 220, 200), "IMAGE": (100, 200, 120),
               "STRING": (220, 130, 130)}
    for _, src, src_slot, dst, dst_slot, t in ui["links"]:
        a, b = nodes[src], nodes[dst]
        p = at(a["pos"][0] + a["size"][0], a["pos"][1] + 14 + 24 * src_slot)
        q = at(b["pos"][0], b["pos"][1] + 14 + 24 * dst_slot)
        mid = (p[0] + q[0]) / 2
        draw.line([p, (mid, p[1]), (mid, q[1]), q], fill=colours.get(t, (170, 170, 170)), width=max(2, round(3 * k)))
    for n in nodes.values():
        (x, y), (w, h) = n["pos"], n["size"]
        draw.rounded_rectangle([at(x, y - head), at(x + w, y + h)], radius=max(2, round(8 * k)), fill=(53, 53, 53),
                               outline=(20, 20, 20), width=2)
        draw.rounded_rectangle([at(x, y - head), at(x + w, y)], radius=max(2, round(8 * k)), fill=(72, 72, 80))
        draw.text(at(x + 10, y - head + 6), n.get("title") or titles.get(n["type"], n["type"]), font=title_font,
                  fill=(235, 235, 235))
        lines = [s["name"] for s in n["inputs"]]
        ins = [i for i in specs[n["type"]][0] if i[2]]
        values = iter(n["widgets_values"])
        for name, *_rest, control in ins:
            value = next(values)
            if control:
                next(values)
            lines.append(f"{name}: {value}")
        out_width = [0.0] * max(len(lines), len(n["outputs"]))
        for i, out in enumerate(n["outputs"]):
            right = at(x + w - 12, y + 6 + 24 * i)
            out_width[i] = draw.textlength(out["name"], font=text_font)
            draw.text((right[0] - draw.textlength(out["name"], font=text_font), right[1]), out["name"], font=text_font,
                      fill=(150, 190, 255))
        for i, line in enumerate(lines):
            if 14 + 24 * (i + 1) > h:
                break
            room = k * (w - 24) - out_width[i] - (12 * k if out_width[i] else 0)
            if draw.textlength(line, font=text_font) > room:
                while line and draw.textlength(line + "...", font=text_font) > room:
                    line = line[:-1]
                line += "..."
            draw.text(at(x + 12, y + 6 + 24 * i), line, font=text_font, fill=(200, 200, 200) if i >= len(n["inputs"])
                      else (150, 190, 255))
    return img.resize(size, Image.LANCZOS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    a = ap.parse_args()
    stale = []
    specs = node_specs()
    for g in graphs():
        preview = OUT / f"{g.name}{PREVIEW}"
        if not preview.exists():
            if a.check:
                stale.append(f"{preview.relative_to(ROOT)} (missing)")
            else:
                preview.parent.mkdir(parents=True, exist_ok=True)
                schematic(g, specs).save(preview, quality=88)
                print(f"wrote {preview.relative_to(ROOT)} (schematic)")
    for path, text in render().items():
        if a.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("out of date (run python scripts/make_workflows.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
