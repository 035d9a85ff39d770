"""Reliability probe: the hostile cases behind the README's Reliability section, against a real ComfyUI.

    python -m bench.probe [--cancel-runs 5] [--out bench/results/probe.md]

Starts a ComfyUI 0.3.75 server with the pack (installed by scripts/setup_comfyui.sh; the same harness
as tests/integration), then runs each probe as a user of the HTTP API would: bad model files, bad
parameters, an image size whose run cannot fit, the loaders' lists and a file of the wrong kind or missing
(issue 37), cancels of a batch-8 run at the paper's settings (since the tier sweep also the scenes
defaults). The library calls of issue 37 (an int class, no drafter, a missing or wrong file) run in this process.
For every probe it checks that the error is clear (names the input or the file and what is wrong),
that the server is alive afterwards, and that the next output is identical to one taken before any
probe (a fixed AR prompt; for the cancels, the cancelled prompt itself against its undisturbed run).
It prints a table, the cancel latency (from POST /interrupt to the end of the run, median of the
cancel runs) and the server's memory before and after, and writes them as markdown with --out.
Exit status 1 when a probe fails. tests/integration/test_reliability.py runs the same probes.
"""
from __future__ import annotations

import argparse
import io
import json
import pickle
import statistics
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from comfy_server import ComfyServer  # noqa: E402

TARGET, DRAFTER = "embedded/target.safetensors", "embedded/drafter.safetensors"
PYRAMID_TARGET = "embedded/scenes128/target.safetensors"   # the 128 px member: r = 2 from TARGET, r = 4 from DRAFTER
LOADERS = ("MuLoSDLoadTarget", "MuLoSDLoadDrafter")
# bad files whose header says what they are: refused at POST /prompt, before anything runs (issue 37)
REFUSED_BY_HEADER = {"tokenizer_as_gpt.safetensors"}
REFERENCE_SEED = 31337
# The cancel probe runs the paper's verifier settings (tau 0.3, k 8, one row a step), set on the node so that
# it does not follow the shipped defaults: settings that accept whole drafts (the preset mulo_fastest) end a
# batch of 8 in under a second, nothing left to cancel at 1 s; the paper's settings reject almost every scenes
# draft and resample it (about 0.9 s an image on one thread).
CANCEL_VERIFIER = "paper"
CANCEL_BATCH = 16       # images per cancelled run: at 8 a fast machine finished in 1.7 s, too soon to cancel at 1 s
CANCEL_AFTER = 1.0      # seconds after the sampler starts
CANCEL_LIMIT = 2.0      # a cancelled run must end within this many seconds of the interrupt
PYRAMID_CANCEL_BATCH = 1   # the 128 px r = 2 pair at the paper's settings: seconds an image on one thread


@dataclass
class Row:
    probe: str
    clear: bool = False        # the error names the input or the file and what is wrong
    alive: bool = False        # the server still answers
    identical: bool = False    # the next output equals the undisturbed one
    detail: str = ""           # the error as the user sees it (shortened), or a measurement
    numbers: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.clear and self.alive and self.identical


# --------------------------------------------------------------------------- graphs
def node(info: dict, class_type: str, **inputs) -> dict:
    """An API node with every required widget input at its default, then `inputs`."""
    values = {}
    for name, entry in info[class_type]["input"].get("required", {}).items():
        kind, opts = entry[0], (entry[1] if len(entry) > 1 else {})
        if isinstance(kind, list) or kind == "COMBO":
            values[name] = opts.get("default", (combo_choices(entry) or [None])[0])
        elif "default" in opts:
            values[name] = opts["default"]
    values.update(inputs)
    return {"class_type": class_type, "inputs": values}


def mulo_graph(info: dict, target: str = TARGET, drafter: str = DRAFTER, **sampler) -> dict:
    return {"1": node(info, "MuLoSDLoadTarget", model_name=target),
            "2": node(info, "MuLoSDLoadDrafter", model_name=drafter),
            "3": node(info, "MuLoSDSampler", drafter=["2", 0], target=["1", 0], **sampler),
            "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}}}


def ar_graph(info: dict, target: str = TARGET, **sampler) -> dict:
    return {"1": node(info, "MuLoSDLoadTarget", model_name=target),
            "3": node(info, "MuLoSDARSampler", target=["1", 0], **sampler),
            "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}}}


# --------------------------------------------------------------------------- server helpers
def images(server: ComfyServer, entry: dict, node_id: str = "4") -> list[bytes]:
    """The output images as decoded pixel bytes (PNG metadata aside)."""
    from PIL import Image

    if entry["status"]["status_str"] != "success":
        raise RuntimeError(json.dumps(entry["status"])[:2000])
    return [Image.open(io.BytesIO(server.view(im))).tobytes() for im in entry["outputs"][node_id]["images"]]


def forget_outputs(server: ComfyServer) -> None:
    """Make the next prompt execute for real (ComfyUI would reuse cached node outputs)."""
    server.post("/free", json={"free_memory": True}, timeout=300).raise_for_status()
    time.sleep(1.5)  # the prompt worker drops its output cache when it wakes up to the flag


def post_prompt(server: ComfyServer, graph: dict) -> tuple[int, dict]:
    # posted as text: requests refuses NaN in json=, which a hostile client can send all the same
    r = server.post("/prompt", data=json.dumps({"prompt": graph, "client_id": server.client_id}),
                    headers={"Content-Type": "application/json"}, timeout=300)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, {"raw": r.text}


def failure(server: ComfyServer, graph: dict, timeout: float = 300) -> tuple[str, str]:
    """Queue `graph`, expecting it to be refused: (where, message). `where` is 'validation' for an HTTP 400
    (message: every node error's message and details) or the failing node's type for an execution error."""
    status, body = post_prompt(server, graph)
    if status == 400:
        errs = [f"{e.get('message', '')}: {e.get('details', '')} (input {e.get('extra_info', {}).get('input_name')})"
                for n in body.get("node_errors", {}).values() for e in n.get("errors", [])]
        return "validation", " | ".join(errs) or json.dumps(body.get("error"))
    if status != 200:
        return f"HTTP {status}", json.dumps(body)[:500]
    entry = server.wait(body["prompt_id"], timeout=timeout)
    for kind, data in entry["status"].get("messages", []):
        if kind == "execution_error":
            return data["node_type"], f"{data['exception_type']}: {data['exception_message']}"
    return "no error", entry["status"]["status_str"]


def rss(server: ComfyServer) -> int:
    import psutil

    return psutil.Process(server.pid).memory_info().rss


# --------------------------------------------------------------------------- probes
class _Marker:
    """Unpickling this would create a file: the proof that no checkpoint code runs."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def bad_files(server: ComfyServer) -> dict[str, tuple[bytes, str]]:
    """File name -> (content, a phrase the loader's error must contain)."""
    from PIL import Image

    from mulosd_core.models.registry import embedded_path

    data = Path(embedded_path("target")).read_bytes()
    png = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(png, format="PNG")
    foreign = io.BytesIO()
    with zipfile.ZipFile(foreign, "w") as z:
        z.writestr("notes/readme.txt", "not weights")
    random = bytes((i * 7919 + 13) % 251 for i in range(8192))
    text = b"These are not the weights you are looking for.\n" * 4
    js = json.dumps({"model": {"weight": [1.0, 2.0]}, "image_size": 64}).encode()
    files = {"truncated.safetensors": (data[: len(data) // 2], "truncated"),
             "empty.safetensors": (b"", "empty"),
             "picture.safetensors": (png.getvalue(), "PNG image"),
             "picture.pt": (png.getvalue(), "PNG image"),
             "code.pt": (pickle.dumps({"model": _Marker(str(server.base_dir / "code_ran.txt"))}), "pickle"),
             "tokenizer_as_gpt.safetensors": (Path(embedded_path("vq")).read_bytes(), "is a VQ tokenizer")}
    for name, content, word in (("text", text, "text"), ("random", random, "no known weights format"),
                                ("zip", foreign.getvalue(), "zip archive"), ("json", js, "JSON")):
        for ext in ("pt", "safetensors"):
            files[f"{name}.{ext}"] = (content, word)
    return files


class Prober:
    def __init__(self, server: ComfyServer) -> None:
        self.server = server
        self.info = server.object_info()
        self.reference: list[bytes] | None = None
        self.undisturbed: dict[tuple, tuple[list[bytes], float]] = {}   # (batch, seed) -> images, seconds

    def reference_graph(self) -> dict:
        return ar_graph(self.info, batch_size=1, seed=REFERENCE_SEED)

    def take_reference(self) -> None:
        forget_outputs(self.server)
        self.reference = images(self.server, self.server.run(self.reference_graph(), timeout=300))

    def after(self, row: Row) -> Row:
        """Fill in alive and identical: the reference prompt, run for real, gives the reference images."""
        row.alive = self.server.alive() and self.server.get("/system_stats", timeout=300).status_code == 200
        if row.alive:
            forget_outputs(self.server)
            row.identical = images(self.server, self.server.run(self.reference_graph(), timeout=300)) == self.reference
        return row

    # -- bad files ---------------------------------------------------------------------------
    def files(self) -> list[Row]:
        folder = self.server.base_dir / "models" / "mulosd"
        folder.mkdir(parents=True, exist_ok=True)
        files = bad_files(self.server)
        for name, (content, _) in files.items():
            (folder / name).write_bytes(content)
        self.server.get("/object_info/MuLoSDLoadTarget").raise_for_status()  # the list now shows them
        rows = []
        for name, (_, word) in files.items():
            g = ar_graph(self.info, target=name, batch_size=1)
            g["1"]["inputs"].update(vq_name="embedded/vq.safetensors", image_size=64)  # so the file itself is read
            where, msg = failure(self.server, g)
            # a file whose header says what it is is refused before the prompt runs; the others when read
            want = "validation" if name in REFUSED_BY_HEADER else "MuLoSDLoadTarget"
            clear = where == want and name in msg and word in msg and "MemoryError" not in msg
            if name == "code.pt":
                clear = clear and not (self.server.base_dir / "code_ran.txt").exists()
            rows.append(self.after(Row(f"file {name}", clear, detail=msg)))
        return rows

    # -- bad parameters ----------------------------------------------------------------------
    def parameters(self) -> list[Row]:
        info, rows = self.info, []
        swapped = mulo_graph(info, target=DRAFTER, drafter=TARGET, batch_size=1)
        cases = [
            ("class_id 2.5", ar_graph(info, class_id=2.5), "validation", ["class_id: expected a whole number", "2.5"]),
            ("class_id 12", ar_graph(info, class_id=12), "MuLoSDARSampler", ["class_id: expected 0..11", "12"]),
            ("batch_size 0.5", mulo_graph(info, batch_size=0.5), "validation", ["batch_size: expected a whole number"]),
            ("batch_size 1000", ar_graph(info, batch_size=1000), "validation", ["batch_size", "1000"]),
            ("cfg NaN", ar_graph(info, cfg=float("nan")), "validation", ["cfg: expected a finite number", "nan"]),
            ("mode 'bogus'", ar_graph(info, mode="bogus"), "MuLoSDARSampler",
             ["mode: expected one of ['ar', ", "'bogus'"]),
            ("image_size 66", ar_graph(info), "MuLoSDLoadTarget", ["image_size: expected a multiple of 4", "66"]),
            ("drafter larger than target", swapped, "MuLoSDSampler", ["drafter", "grid"]),
        ]
        cases[6][1]["1"]["inputs"]["image_size"] = 66
        for name, graph, want_where, words in cases:
            where, msg = failure(self.server, graph)
            rows.append(self.after(Row(f"parameter {name}", where == want_where and all(w in msg for w in words),
                                       detail=msg)))
        return rows

    def huge_image(self, target: str = TARGET) -> Row:
        """image_size 4096 with the AR sampler: refused before sampling, naming the estimate; memory unchanged."""
        g = ar_graph(self.info, target=target, batch_size=1, seed=3)
        g["1"]["inputs"]["image_size"] = 4096
        before = rss(self.server)
        t0 = time.perf_counter()
        where, msg = failure(self.server, g)
        seconds = time.perf_counter() - t0
        after = rss(self.server)
        words = ["NotEnoughMemory", "image_size (now 4096 px)", "MB are free", "VQ decode/encode"]
        # the advice fits the graph: no drafter to move (issue 37), no streaming on the cpu
        fits = "drafter" not in msg and "stream" not in msg
        row = Row("image_size 4096 (AR)" + ("" if target == TARGET else f", {target}"), where == "MuLoSDARSampler" and all(w in msg for w in words) and fits,
                  detail=f"refused in {seconds:.1f} s, server RSS {before / 2**20:.0f} -> {after / 2**20:.0f} MB: {msg}",
                  numbers={"rss_before_mb": before / 2**20, "rss_after_mb": after / 2**20, "seconds": seconds})
        return self.after(row)

    # -- the 128 px pair (issue 36) ----------------------------------------------------------
    def pyramid(self) -> list[Row]:
        """The refusals hold for the 128 px member: an Upsampler ratio that does not match its r = 4 pair, the
        128 px target as the 64 px target's drafter, a 4096 px run estimated before sampling; and a cancelled
        128 px r = 2 run ends within CANCEL_LIMIT (its target calls are four times the 64 px ones)."""
        info, rows = self.info, []
        wrong_ratio = mulo_graph(info, target=PYRAMID_TARGET, drafter=DRAFTER, batch_size=1, upsampler=["5", 0])
        wrong_ratio["5"] = node(info, "MuLoSDUpsampler", kind="learned", ratio=2)
        swapped = mulo_graph(info, target=TARGET, drafter=PYRAMID_TARGET, batch_size=1)
        for name, graph, words in (
                ("128 px r = 4 with an Upsampler of ratio 2", wrong_ratio,
                 ["upsampler ratio 2", "target grid 32", "drafter grid 8", "= 4"]),
                ("128 px target as the 64 px target's drafter", swapped, ["drafter", "grid"])):
            where, msg = failure(self.server, graph)
            rows.append(self.after(Row(name, where == "MuLoSDSampler" and all(w in msg for w in words), detail=msg)))
        rows.append(self.huge_image(PYRAMID_TARGET))
        rows.append(self.cancel(1, batch=PYRAMID_CANCEL_BATCH, target=PYRAMID_TARGET, drafter=TARGET))
        return rows

    # -- the loaders' choices (issue 37) -----------------------------------------------------
    def choices(self) -> list[Row]:
        """The lists offer only files of their kind; the embedded classifier or upsampler chosen as a GPT is
        named as such before anything runs; the llamagen_c2i workflow without its downloads names every
        missing file on each loader; the loader's text names the VQ file as listed."""
        info, rows = self.server.object_info(), []
        bad = {"model_name": {f"embedded/{m}.safetensors" for m in ("vq", "classifier", "upsampler")},
               "vq_name": {f"embedded/{m}.safetensors" for m in ("target", "drafter", "classifier", "upsampler")}}
        want = {"model_name": "embedded/target.safetensors", "vq_name": "embedded/vq.safetensors"}
        wrong = [f"{cls}.{name} offers {sorted(bad[name] & set(options(info, cls, name)))}"
                 for cls in LOADERS for name in bad if bad[name] & set(options(info, cls, name))]
        missing = [f"{cls}.{name} lacks {want[name]}" for cls in LOADERS for name in want
                   if want[name] not in options(info, cls, name)]
        detail = "; ".join(wrong + missing) or ", ".join(f"{name}: {len(options(info, LOADERS[0], name))} files"
                                                         for name in want)
        rows.append(self.after(Row("lists offer only their kind", not wrong and not missing, detail=detail)))
        for member, kind in (("classifier", "is an image classifier"), ("upsampler", "is a learned upsampler")):
            name = f"embedded/{member}.safetensors"
            where, msg = failure(self.server, ar_graph(info, target=name, batch_size=1))
            clear = (where == "validation" and f"{name} {kind}" in msg and "not a LlamaGen GPT" in msg
                     and "(input model_name)" in msg and "image size" not in msg)
            rows.append(self.after(Row(f"model_name {name}", clear, detail=msg)))
        rows.append(self.after(self.c2i_without_downloads()))
        rows.append(self.after(self.vq_text()))
        return rows

    def c2i_without_downloads(self) -> Row:
        """example_workflows/api/llamagen_c2i.json on a server without its files: each loader's model_name
        and vq_name errors both name both of its files."""
        graph = json.loads((ROOT / "example_workflows" / "api" / "llamagen_c2i.json").read_text())
        status, body = post_prompt(self.server, graph)
        loaders = {k: n for k, n in graph.items() if n["class_type"] in LOADERS}
        seen, clear = [], status == 400 and bool(loaders)
        for k, n in loaders.items():
            errors = {e["extra_info"]["input_name"]: e["details"]
                      for e in body.get("node_errors", {}).get(k, {}).get("errors", [])}
            files = (n["inputs"]["model_name"], n["inputs"]["vq_name"])
            clear = clear and set(errors) == {"model_name", "vq_name"} and all(
                f"{name}: '{f}' is not in the mulosd model folders" in d for d in errors.values()
                for name, f in zip(("model_name", "vq_name"), files))
            seen.append(f"{n['class_type']}: {errors.get('model_name', '(none)')}")
        return Row("llamagen_c2i without its downloads", clear, detail=" | ".join(seen) or json.dumps(body)[:500])

    def vq_text(self) -> Row:
        """The loader's text output names the tokenizer as listed: the two embedded families' differ."""
        g = ar_graph(self.info, target="embedded/patterns/target.safetensors", batch_size=1)
        entry = self.server.run(g, timeout=300)
        text = " ".join(entry.get("outputs", {}).get("1", {}).get("text", [])) or json.dumps(entry.get("status"))[:500]
        return Row("loader text names its VQ file", "VQ embedded/patterns/vq.safetensors (" in text, detail=text)

    # -- library calls (issue 37), in this process ---------------------------------------------
    def library(self) -> list[Row]:
        """What a script gets from mulosd_core: one int class, generate without a drafter, load_model on a
        missing path and on the embedded classifier."""
        import torch

        from mulosd_core.decode import generate
        from mulosd_core.models import registry

        target = registry.load_embedded("target")
        missing = str(Path(tempfile.gettempdir()) / "mulosd-probe-absent" / "c2i_XL_384.pt")
        calls = [
            ("generate(target, 3)", lambda: tuple(generate(target, 3, method="ar", decode=False).tokens.shape),
             [f"returned (1, {target.num_tokens})"]),
            ("generate without a drafter", lambda: generate(target, torch.tensor([3]), method="speculative"),
             ["drafter: ", "'ar'"]),
            ("load_model on a missing path", lambda: registry.load_model(missing, missing.replace("c2i_XL_384", "vq")),
             ["gpt_path: ", "c2i_XL_384.pt: no such file", "vq_path: ", "vq.pt: no such file"]),
            ("load_model on the classifier",
             lambda: registry.load_model(registry.embedded_path("classifier"), registry.embedded_path("vq")),
             ["gpt_path: ", "classifier.safetensors is an image classifier", "not a LlamaGen GPT"]),
        ]
        rows = []
        for name, call, words in calls:
            try:
                msg = f"returned {call()}"
            except Exception as e:
                msg = f"{type(e).__name__}: {e}"
            clear = all(w in msg for w in words) and "image size" not in msg and "TypeError" not in msg
            rows.append(self.after(Row(f"library: {name}", clear, detail=msg)))
        return rows

    # -- cancel ------------------------------------------------------------------------------
    def run_undisturbed(self, batch: int = CANCEL_BATCH, seed: int = 4242, target: str = TARGET,
                        drafter: str = DRAFTER) -> tuple[list[bytes], float]:
        """The MuLo-SD prompt of the cancel probe run to its end (once; it also loads the drafter)."""
        key = (batch, seed, target, drafter)
        if key not in self.undisturbed:
            forget_outputs(self.server)
            t0 = time.perf_counter()
            got = images(self.server, self.server.run(self.cancel_graph(*key), timeout=900))
            self.undisturbed[key] = got, time.perf_counter() - t0
        return self.undisturbed[key]

    def cancel_graph(self, batch: int, seed: int, target: str = TARGET, drafter: str = DRAFTER) -> dict:
        """The pair with a Local Verifier at the paper's settings (CANCEL_VERIFIER)."""
        from mulosd_core import presets

        v, d = presets.mulo_verifier(CANCEL_VERIFIER), presets.mulo_defaults(CANCEL_VERIFIER)
        g = mulo_graph(self.info, target=target, drafter=drafter, batch_size=batch, seed=seed,
                       rows_per_step=d.rows_per_step, verifier=["5", 0])
        g["5"] = node(self.info, "MuLoSDLocalVerifier", rule=v.rule, tau=v.tau, k_neighbours=v.k_neighbours,
                      expansion_radius=v.expansion_radius, recheck=v.recheck)
        return g

    def cancel(self, runs: int, batch: int = CANCEL_BATCH, seed: int = 4242, target: str = TARGET,
               drafter: str = DRAFTER) -> Row:
        """Cancel a batch-`batch` run (cancel_graph) CANCEL_AFTER s after the sampler starts, `runs` times;
        latency = POST /interrupt to the run's end (execution_interrupted). Then the same prompt again must give
        the undisturbed run's images."""
        prompt = self.cancel_graph(batch, seed, target, drafter)
        undisturbed, full = self.run_undisturbed(batch, seed, target, drafter)
        name = f"cancel batch {batch}" + ("" if target == TARGET else f", {target}")
        if full < 2 * CANCEL_AFTER:   # the run must still be going, with a second to spare, when the cancel comes
            return Row(name, alive=self.server.alive(),
                       detail=f"an undisturbed run takes {full:.1f} s: too short to test a cancel at "
                              f"{CANCEL_AFTER:.0f} s (make the probe's run longer)", numbers={"full_run_s": full})
        latencies, ends = [], []
        for _ in range(runs):
            forget_outputs(self.server)
            with self.server.websocket() as ws:
                status, body = self.server.queue(prompt, client_id=ws.client_id)
                if status != 200 or not ws.wait_executing(body["prompt_id"], "3", timeout=300):
                    return Row(name, detail=f"the sampler never started: {status} {body}")
                time.sleep(CANCEL_AFTER)
                t_int = time.perf_counter()
                self.server.interrupt(body["prompt_id"])
                rest = ws.collect(body["prompt_id"], timeout=600)
                latencies.append(time.perf_counter() - t_int)
                ends.append(rest[-1]["type"])
        median = statistics.median(latencies)
        again = images(self.server, self.server.run(prompt, timeout=900))
        row = Row(f"{name} at {CANCEL_AFTER:.0f} s (x{runs})",
                  clear=all(e == "execution_interrupted" for e in ends) and median < CANCEL_LIMIT,
                  alive=self.server.alive(), identical=again == undisturbed,
                  detail=f"latency median {median:.2f} s (runs {', '.join(f'{x:.2f}' for x in latencies)}); "
                         f"an undisturbed run takes {full:.1f} s",
                  numbers={"latency_median_s": median, "latencies_s": latencies, "full_run_s": full})
        return row


def combo_choices(entry: list) -> list:
    """A combo input's choices from its /object_info entry (a list, or a COMBO entry's options)."""
    return entry[0] if isinstance(entry[0], list) else (entry[1] if len(entry) > 1 else {}).get("options", [])


def options(info: dict, class_type: str, name: str) -> list:
    """The choices of a required combo input of `class_type`."""
    return combo_choices(info[class_type]["input"]["required"][name])


PARTS = ("files", "parameters", "huge_image", "pyramid", "choices", "library", "cancel")


def run_probes(server: ComfyServer, cancel_runs: int = 5, only: tuple[str, ...] = ()) -> tuple[list[Row], dict]:
    """All probes on a started server; returns the rows and the memory figures (MB)."""
    p = Prober(server)
    p.take_reference()
    if cancel_runs and (not only or "cancel" in only):
        p.run_undisturbed()      # warm-up: every model the probes use is loaded before memory is read
    forget_outputs(server)
    mem_before = rss(server)
    rows: list[Row] = []
    for part in PARTS:
        if only and part not in only or part == "cancel" and not cancel_runs:
            continue
        try:
            got = p.cancel(cancel_runs) if part == "cancel" else getattr(p, part)()
        except Exception as e:   # a probe that breaks is a failed row, and the others still run
            got = Row(part, alive=server.alive(), detail=f"the probe itself failed: {type(e).__name__}: {e}"[:500])
        got = got if isinstance(got, list) else [got]
        for r in got:
            print(f"[probe] {r.probe}: clear {r.clear}, alive {r.alive}, identical {r.identical}; {r.detail[:300]}",
                  file=sys.stderr, flush=True)
        rows.extend(got)
    forget_outputs(server)
    mem_after = rss(server)
    return rows, {"rss_before_mb": mem_before / 2**20, "rss_after_mb": mem_after / 2**20,
                  "growth": (mem_after - mem_before) / mem_before}


def table(rows: list[Row], memory: dict) -> str:
    yes = {True: "yes", False: "**NO**"}
    lines = ["| probe | clear error | server alive | output identical after | what the user sees |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        detail = r.detail.replace("|", "/").replace("\n", " ")
        lines.append(f"| {r.probe} | {yes[r.clear]} | {yes[r.alive]} | {yes[r.identical]} | "
                     f"{detail[:160] + ('...' if len(detail) > 160 else '')} |")
    lines.append("")
    lines.append(f"Server memory (RSS) after the warm-up (one AR and one batch-8 MuLo-SD run, every model loaded) "
                 f"{memory['rss_before_mb']:.0f} MB, after the probes "
                 f"{memory['rss_after_mb']:.0f} MB ({memory['growth']:+.1%}).")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cancel-runs", type=int, default=5, help="cancels of the batch-8 run (0: skip)")
    ap.add_argument("--only", nargs="*", default=[], choices=list(PARTS))
    ap.add_argument("--out", help="write the table as markdown here")
    ap.add_argument("--ready-timeout", type=float, default=600, help="seconds to wait for the server to start")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mulosd-probe-") as base:
        server = ComfyServer(Path(base))
        try:
            server.start(ready_timeout=args.ready_timeout)
            errors = server.pack_import_errors()
            if errors:
                print("the pack failed to import:\n" + "\n".join(errors), file=sys.stderr)
                return 1
            t0 = time.perf_counter()
            rows, memory = run_probes(server, args.cancel_runs, tuple(args.only))
            seconds = time.perf_counter() - t0
        finally:
            server.stop()
    text = table(rows, memory)
    ok = all(r.ok for r in rows) and memory["growth"] < 0.05
    summary = (f"{sum(r.ok for r in rows)}/{len(rows)} probes passed in {seconds:.0f} s; memory growth "
               f"{memory['growth']:+.1%} (limit 5%)")
    print(text + "\n\n" + summary)
    if args.out:
        Path(args.out).write_text("# Reliability probe (`python -m bench.probe`)\n\n" + text + "\n\n" + summary + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
