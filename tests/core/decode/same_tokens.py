"""Every named method's tokens at fixed seeds, the record `test_same_tokens` compares against.

    python -m tests.core.decode.same_tokens --write    # re-record (only when a change of tokens is intended)
    python -m tests.core.decode.same_tokens --add      # record a new method's cases, the others untouched

The record was first written before the engine became the decode package (issue 34), so the test shows
that the move kept every method's tokens bit for bit. Variants beyond the named presets cover paths the
presets do not reach (CFG, span wave feed, greedy rule, recheck of all tokens, the grouped test).
"""
from __future__ import annotations

import argparse
import os
from dataclasses import replace

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
RECORD = os.path.join(HERE, "data", "same-tokens.pt")
FAMILIES = ("scenes", "patterns")
CLASSES = [1, 6]
SEED = 3


def cases():
    """(name, family, method config, drafter kind, sampling or None) for every case recorded."""
    from mulosd_core import presets
    from mulosd_core.sampling import SamplingConfig
    out = []
    for fam in FAMILIES:
        named = presets.method_presets(fam)
        for name, (cfg, kind) in named.items():
            out.append((f"{fam}/{name}", fam, cfg, kind, None))
        mi = named["mulo_islands"][0]
        v = mi.verifier
        extra = {
            "span_feed": replace(mi, verifier=replace(v, wave_feed="span")),
            "greedy_rule": replace(mi, verifier=replace(v, rule="greedy", recheck=2)),
            "recheck_all": replace(mi, verifier=replace(v, recheck=4, recheck_scope="all")),
            "grouped_recheck": replace(mi, verifier=replace(v, rule="grouped", recheck=2)),
            "raster_serial": replace(mi, verifier=replace(v, rejection="raster", resampling="serial", recheck=0),
                                     parallel_window=0),
        }
        for name, cfg in extra.items():
            out.append((f"{fam}/{name}", fam, cfg, "low", None))
    cfg2 = SamplingConfig(cfg_scale=2.0, temperature=1.0, top_k=0, top_p=1.0)
    for name in ("ar", "sd", "zipar", "sjd", "gsd", "mulo_islands", "lantern"):
        cfg, kind = presets.method_presets("scenes")[name]
        out.append((f"scenes-cfg2/{name}", "scenes", cfg, kind, cfg2))
    return out


def load_families():
    from bench.models import load_models
    return {fam: load_models("embedded", family=fam) for fam in FAMILIES}


def run_case(models, cfg, kind, sampling):
    from mulosd_core.api import generate
    return generate(models.target, torch.tensor(CLASSES), sampling, cfg, models.drafter_for(kind), seed=SEED,
                    decode=False).tokens.to(torch.int16)


def record(skip: frozenset = frozenset()) -> dict[str, torch.Tensor]:
    torch.set_num_threads(1)
    fams = load_families()
    return {name: run_case(fams[fam], cfg, kind, sampling) for name, fam, cfg, kind, sampling in cases() if name not in skip}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write the record to {RECORD}")
    ap.add_argument("--add", action="store_true", help="record only the cases the record lacks (a new method), "
                                                       "keeping every recorded one as it is")
    args = ap.parse_args()
    held = torch.load(RECORD, weights_only=True) if args.add else {}
    rec = {**held, **record(frozenset(held))}
    if args.write or args.add:
        os.makedirs(os.path.dirname(RECORD), exist_ok=True)
        torch.save(rec, RECORD)
        print(f"wrote {len(rec)} cases to {RECORD} ({os.path.getsize(RECORD) // 1024} KB)")
