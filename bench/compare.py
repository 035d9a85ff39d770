"""Every method on the same classes and seeds, in one process (docs/DESIGN.md sections 5 and 10).

    python -m bench.compare [--samples N] [--device cpu] [--dtype float32] [--batch 1]
                            [--methods ar mulo_islands ...] [--quick] [--models embedded|tiny]
                            [--out bench/results] [--warmup 1] [--tag NAME] [--threads T] [--resume FILE]

Sample i is class i % NUM_CLASSES with seed i (a batch starting at sample i uses seed i, and
the engine gives its element j the stream of seed i + j, so batch size does not change the
samples). For every batch, every method runs once before the next batch starts, in an order
rotated by one method per batch, so machine noise (other jobs, thermal drift) hits all
methods alike. `--warmup` runs per method (class 0, seeds 10000+) happen first and are not
timed. Wall time covers `decode.generate` including VQ decoding, per image (run time / batch);
quality metrics (classifier, NLL) are computed after the timed region.

Speed: `wall_ratio_vs_ar` = median AR seconds per image / median method seconds per image
(a speed-up: > 1 is faster than AR), always against the AR runs of this same invocation;
`wall_ratio_ci` is a paired bootstrap 95% interval over runs of the same median(AR) / median(method);
`share_of_oracle` = wall_ratio_vs_ar / wall_ratio_vs_ar of mulo_oracle (the pipeline's ceiling:
every draft accepted). Counters are per `generate` call (per batch; equal to per image at
batch 1): target_calls, drafter_calls; tokens_per_target_call = tokens per image / target calls.

Quality: classifier accuracy against the requested class (bootstrap CI), Frechet distance in
classifier features against real procedural samples (`make_batch(classes, REAL_SEED)`,
bootstrap CI via bootstrap_ci_pair), target NLL of the final grid (mean per-token -log p under
the target with the sampling's CFG/temperature/top-k/top-p, floor 1e-12), and the same
against AR with paired intervals (`vs_ar`). With `--models tiny` models and classifier are
random: the quality numbers are meaningless and labelled so. Those two columns cannot see a
drafter's smooth image; the measures that can (bench.measures: C2ST against AR and against real
data through the VQ, multi-scale patch SWD, precision / recall, diversity ratios, the NLL gap)
are computed on the same images, and each row gets its quality tier (bench.measures.TIER_RULE).

Control rows (left out with --no-controls): `ar_null` (AR at seeds i + 1e6: each detector's noise),
`drafter_alone_<upsampler>` (the drafter's sample lifted by each upsampler, no target call: what
verification is for; a measure that passes it is reported blind) and `vq_roundtrip` (real images
through the VQ: the ceiling of any token model). Their speed columns are not a method's.

A long run is resumable with `--resume FILE`: the records are saved there every two minutes, a rerun of the
same command continues after the last saved batch (warm-up again; settings.resumed_at_batches says where),
and the file is removed once the results are written. The recorded command leaves `--resume` out.

Peak memory: on CUDA the max allocated bytes over the method's runs; on CPU the growth of the
process's max RSS (`resource.getrusage`) during the method's runs -- max RSS never goes down,
so only runs that reach a new process high show a growth; labelled `cpu_max_rss_growth`.

Outputs in --out, tag `<device>-<models>[-quick]` unless --tag: `<tag>.json` (schema below),
`<tag>.md`, and PIL-drawn PNGs `<tag>-pareto.png`, `<tag>-time-split.png`, `<tag>-grid.png`
(rows: AR, MuLo-SD islands, its acceptance map).

JSON: {"command", "date", "invocation", "hardware": {processor, machine, platform, cpu_count,
torch, device, device_name}, "samples", "settings": {models, device, dtype, batch, warmup,
sampling, grid, tokens_per_image, classes, seeds, real_seed, quality_meaningful, ...},
"methods": {name: {"target_calls", "drafter_calls", "tokens_per_target_call", "acceptance_rate",
"resampled_fraction", "wall_seconds_median", "wall_seconds_iqr", "wall_seconds_q25_q75",
"wall_ratio_vs_ar", "wall_ratio_ci", "share_of_oracle", "time_split", "weights_bytes" (GPT weights of
target and drafter, a storage both share counted once), "peak_memory", "accuracy",
"accuracy_ci", "fd", "fd_ci", "nll", "nll_ci", "vs_ar", "kind", "drafter", "config",
"ratio_reference", "runs": {per-run lists}}}, "checks": {"passed", "failures"}}

`--quick` runs 4 samples of ar, sd, lantern, zipar, sjd, gsd, mulo_serial, mulo_islands, mulo_oracle
and exits non-zero when a consistency check fails (every run also records the checks): token
count equals the grid size, accepted + resampled == tokens for local-rejection methods, ratios
come from this invocation's AR runs, ZipAR's target calls equal `schedules.zipar_nfe`, the oracle
has the fewest target calls among speculative methods. The quality check (bench.summary.check_quality)
also runs: every row has its measures, and with trained models the drafter-alone row is outside the
tiers on a failed test and no C2ST detector is blind to it.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import sys
import time
import uuid

import torch

from mulosd_core.models.registry import DEFAULT_EMBEDDED_FAMILY, DTYPES, EMBEDDED_FAMILIES
from mulosd_core.presets import method_presets

from .measures import TIER_RULE
from .methods import ALL_METHODS, QUICK_METHODS, QUICK_SAMPLES, UPSAMPLERS, control_rows, run_methods
from .models import default_tag, hardware, load_models, model_info
from .quality import N_BOOT_FD, N_BOOT_FD_QUICK, REAL_SEED, WALL_RATIO_CI, real_features, real_sets
from .summary import check_consistency, check_quality, summarise, tier_summary
from .tables import jsonable, markdown, markdown_table, write_plots

SAMPLES = 400          # images per method: the tiers' minimum (bench.measures.TIER_MIN_SAMPLES)


def run_compare(args: argparse.Namespace, argv: list[str] | None = None) -> tuple[dict, dict]:
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    models = load_models(args.models, args.device, dtype, tiny_grid=args.tiny_grid, family=args.family,
                         target=args.target, drafter=args.drafter)
    presets = method_presets(models.target.family)
    names = list(args.methods or (QUICK_METHODS if args.quick else ALL_METHODS))
    unknown = [n for n in names if n not in presets]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; choose from {list(presets)}")
    if "ar" not in names:
        names.insert(0, "ar")                       # ratios need this invocation's AR
    methods = {n: presets[n] for n in names}
    if not args.no_controls:       # tiny random models have no learned upsampler for their codebook
        methods.update(control_rows(tuple(u for u in UPSAMPLERS if args.models != "tiny" or u != "learned")))
    samples = args.samples or (QUICK_SAMPLES if args.quick else SAMPLES)
    invocation = uuid.uuid4().hex
    t0 = time.perf_counter()
    raw = run_methods(models, methods, samples, args.batch, args.warmup,
                      keep_images=models.family.num_classes, progress=not args.no_progress, resume=args.resume)
    bench_seconds = time.perf_counter() - t0
    real = real_features(models, samples)
    t1 = time.perf_counter()
    summary = summarise(raw, methods, real, invocation, device,
                        n_boot_fd=N_BOOT_FD_QUICK if args.quick else N_BOOT_FD, reals=real_sets(models, samples),
                        vocab=models.target.vocab_size, grid=models.target.grid)
    measure_seconds = time.perf_counter() - t1
    t = models.target
    result = {
        "command": "python -m bench.compare " + " ".join(without_resume(sys.argv[1:] if argv is None else argv)),
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "tag": args.tag,
        "invocation": invocation,
        "hardware": hardware(device),
        "samples": samples,
        "settings": {"models": args.models, "family": args.family, "model_info": model_info(models), "device": str(device),
                     "dtype": args.dtype, "batch": args.batch, "warmup": args.warmup, "quick": args.quick,
                     "sampling": models.sampling.to_dict(), "grid": t.grid, "tokens_per_image": t.num_tokens,
                     "image_size": t.image_size, "classes": "sample i: class i % NUM_CLASSES, seed i",
                     "class_names": list(models.family.class_names), "real_seed": REAL_SEED, "real_samples": len(real),
                     "quality_meaningful": models.quality_meaningful, "method_order": "rotated by one per batch",
                     "wall_time": "decode.generate incl. VQ decode, per image; warm-up excluded",
                     "time_split_note": "AR: forward counted as verify, loop overhead in other; zipar/sjd/gsd have no part "
                                        "timers (all under other)",
                     "fd_bootstrap": N_BOOT_FD_QUICK if args.quick else N_BOOT_FD, "wall_ratio_ci": WALL_RATIO_CI,
                     "bench_seconds": bench_seconds, "measure_seconds": measure_seconds, "tier_rule": TIER_RULE,
                     "resumed_at_batches": raw[names[0]]["resumed_at"]},
        "methods": summary,
        "quality": tier_summary(summary),
    }
    fails = check_consistency(result) + ([] if args.no_controls else check_quality(result))
    result["checks"] = {"passed": not fails, "failures": fails}
    return jsonable(result), raw


def without_resume(argv: list[str]) -> list[str]:
    """The command line without `--resume FILE` (where a run keeps its records does not change its results)."""
    out, skip = [], False
    for a in argv:
        if skip or a == "--resume" or a.startswith("--resume="):
            skip = a == "--resume"
            continue
        out.append(a)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=None, help=f"images per method (default {SAMPLES}, --quick "
                                                               f"{QUICK_SAMPLES})")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--batch", type=int, default=1, help="batch size (1 is the paper's setting)")
    ap.add_argument("--methods", nargs="+", default=None, help=f"default: all ({', '.join(ALL_METHODS)})")
    ap.add_argument("--quick", action="store_true", help="4 samples, fewer methods; exit 1 on failed checks")
    ap.add_argument("--models", default="embedded", choices=("embedded", "tiny"))
    ap.add_argument("--family", default=DEFAULT_EMBEDDED_FAMILY, choices=sorted(EMBEDDED_FAMILIES),
                    help="embedded family (scenes: the default, patterns: the near-deterministic hard case)")
    ap.add_argument("--drafter", default="", help="the low-resolution drafter as <family>:<member> (scenes128's "
                                                  "target: scenes:target for r = 2, scenes:drafter for r = 4); default "
                                                  "the family's own")
    ap.add_argument("--target", default="target", choices=("target", "self_target"),
                    help="the family member that is the target (self_target: trained at its grid and at half of it, "
                         "so that mulo_self drafts with its own weights; the family's low-res drafter still serves "
                         "the two-model rows)")
    ap.add_argument("--tiny-grid", type=int, default=4, help="target grid of --models tiny (drafter: half)")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--tag", default=None, help="output name (default <device>-<models>[-<family>][-quick]; the "
                                                 "default family adds nothing)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--no-controls", action="store_true",
                    help="leave out the control rows (AR with other seeds, the drafter alone, real through the VQ)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--resume", default=None, metavar="FILE",
                    help="save the records to FILE as the run goes and continue from it when it holds a run of the "
                         "same settings (removed once the results are written)")
    args = ap.parse_args(argv)
    if args.batch < 1 or (args.samples is not None and args.samples < 1) or args.warmup < 0:
        ap.error("--batch and --samples must be >= 1, --warmup >= 0")
    if args.target != "target" and args.models != "embedded":
        ap.error("--target self_target needs --models embedded")
    if args.tag is None:
        args.tag = default_tag(args.device, args.models, args.family, args.quick)
        if args.target != "target":
            args.tag += f"-{args.target.replace('_', '-')}"
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    result, raw = run_compare(args, argv)
    os.makedirs(args.out, exist_ok=True)
    jpath = os.path.join(args.out, f"{args.tag}.json")
    with open(jpath, "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, f"{args.tag}.md"), "w") as f:
        f.write(markdown(result))
    if not args.no_plots:
        write_plots(result, raw, args.out, args.tag, result["settings"]["image_size"])
    if args.resume and os.path.isfile(args.resume):
        os.remove(args.resume)
    print(markdown_table(result))
    print(f"wrote {jpath} (+ .md, plots) in {time.perf_counter() - t0:.1f}s")
    if not result["checks"]["passed"]:
        print("consistency checks FAILED:\n  " + "\n  ".join(result["checks"]["failures"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
