"""Upsampler and Local Verifier: the two configurable parts of a MuLo-SD step, as configs.

Defaults are the shipped MuLo-SD settings (mulosd_core.presets), so a sampler with these
nodes at their defaults runs the same method as a sampler with them left unconnected.
"""
from __future__ import annotations

from comfy_api.latest import io

from mulosd_core.api import (FILTERS, KINDS, LANTERN_DELTA, LANTERN_K, RECHECK_SCOPES, REJECTIONS, RESAMPLINGS, RULES, UpsamplerConfig,
                             VerifierConfig, mulo_verifier)

from .inputs import check_choices
from .types import MulosdUpsampler, MulosdVerifier

_DEFAULT_VERIFIER = mulo_verifier()
# the rule combo's tooltip, read from the rule table (decode.rules): a new rule documents itself here
RULE_TOOLTIP = "; ".join(f"{name}: {rule.description}" for name, rule in RULES.items()) + (
    ". " + ", ".join(n for n, r in RULES.items() if r.needs_q) + " need a same-resolution drafter.")
_DEFAULT_UPSAMPLER = UpsamplerConfig()


class MuLoSDUpsampler(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="MuLoSDUpsampler", display_name="Upsampler", category="MuLo-SD/components",
            description="How drafted low-resolution token rows become target-resolution tokens (the paper's U_r). "
                        "Connect it to the MuLo-SD Sampler; left unconnected, the sampler uses pixel / bicubic.",
            inputs=[
                io.Combo.Input("kind", options=list(KINDS), default=_DEFAULT_UPSAMPLER.kind,
                               tooltip="pixel: decode the draft, resize the image, re-encode with the target's tokenizer "
                                       "(the default); nearest: repeat each token r x r (no decode); embedding: "
                                       "interpolate code vectors and snap to the nearest codes; learned: a small "
                                       "trained network predicts the target tokens (the embedded family ships one; "
                                       "other codebooks need their own, trained with mulosd_core.train.family)."),
                io.Int.Input("ratio", default=0, min=0, max=16,
                             tooltip="Resolution ratio r = target grid / drafter grid. 0 = derived from the two models; "
                                     "any other value must match them (a check, not an override)."),
                io.Combo.Input("filter", options=list(FILTERS), default=_DEFAULT_UPSAMPLER.filter,
                               tooltip="Resampling filter of the pixel route (and of the embedding route, where "
                                       "bilinear/bicubic apply); also used to shrink committed rows for the drafter."),
                io.Boolean.Input("draw", default=_DEFAULT_UPSAMPLER.draw,
                                 tooltip="learned kind only: draw each draft from the network's distribution instead "
                                         "of taking its most likely code, so the exact rule can verify it (with raster "
                                         "rejection the images are the target's own samples: the lossless mode)."),
            ],
            outputs=[MulosdUpsampler.Output("upsampler", display_name="upsampler",
                                            tooltip="The upsampler settings, for the MuLo-SD Sampler.")],
        )

    @classmethod
    def execute(cls, kind, ratio, filter, draw=False) -> io.NodeOutput:
        check_choices(cls, kind=kind, filter=filter)
        return io.NodeOutput(UpsamplerConfig(kind=kind, ratio=ratio or None, filter=filter, draw=draw))


class MuLoSDLocalVerifier(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        v = _DEFAULT_VERIFIER
        return io.Schema(
            node_id="MuLoSDLocalVerifier", display_name="Local Verifier", category="MuLo-SD/components",
            description="How the target judges drafted tokens and repairs rejections. MuLo-SD defaults: accept a draft when "
                        "the target's probability mass over its k nearest codebook neighbours reaches tau, grow each "
                        "rejection by the expansion radius, resample the grown regions island by island. "
                        "exact/lantern with raster rejection and a same-resolution drafter give SD and LANTERN.",
            inputs=[
                io.Combo.Input("rule", options=list(RULES), default=v.rule,
                               tooltip=RULE_TOOLTIP),
                io.Float.Input("tau", default=v.tau, min=0.0, max=1.0, step=0.01,
                               tooltip="mulo rule: acceptance threshold on the pooled probability mass (0 accepts "
                                       "everything, 1 almost nothing). Lower is faster, higher is closer to the target."),
                io.Int.Input("k_neighbours", default=v.k_neighbours, min=1, max=1024,
                             tooltip="mulo rule: how many nearest codebook entries (the draft itself included) pool "
                                     "their probability. 1 = no pooling (an ablation)."),
                io.Int.Input("expansion_radius", default=v.expansion_radius, min=0, max=16,
                             tooltip="local rejection: rejected positions grow into this Chebyshev neighbourhood, "
                                     "which is resampled too. 0 = resample only the rejected tokens."),
                io.Combo.Input("rejection", options=list(REJECTIONS), default=v.rejection,
                               tooltip="local: keep every accepted token and resample the rejected regions; raster: "
                                       "classic speculative decoding, drop everything after the first rejection."),
                io.Combo.Input("resampling", options=list(RESAMPLINGS), default=v.resampling,
                               tooltip="islands: resample all rejected regions together, one target call per wave; "
                                       "serial: one target call per rejected position, in raster order."),
                io.Float.Input("lantern_delta", default=LANTERN_DELTA, min=0.0, max=1.0, step=0.01,
                               tooltip="lantern rule: cap on the neighbour probability mass added to the draft's own "
                                       "(LANTERN's delta). Its neighbourhood k is LANTERN's 1000 of 16384 codes scaled to the "
                                       "model's codebook (1000 for LlamaGen, 62 for the embedded models)."),
                io.Int.Input("recheck", default=v.recheck, min=0, max=256,
                             tooltip="Our extension, not in the paper (0 = the paper's method). After the islands are "
                                     "resampled, the tokens after them are verified again given the current tokens "
                                     "and resampled if they fail, up to this many rounds (a cap: rounds stop when "
                                     "nothing fails). With local rejection it needs the mulo or greedy rule (set 0 for "
                                     "exact/lantern); raster rejection leaves it nothing to do. Each round that runs "
                                     "costs a target call."),
                io.Combo.Input("recheck_scope", options=list(RECHECK_SCOPES), default=v.recheck_scope,
                               tooltip="What a recheck round verifies again: drafts = accepted drafts whose context "
                                       "changed; all = also resampled tokens whose context changed after they were "
                                       "sampled (every token then fits its final context; costs more target calls)."),
            ],
            outputs=[MulosdVerifier.Output("verifier", display_name="verifier",
                                           tooltip="The verifier settings, for the MuLo-SD Sampler.")],
        )

    @classmethod
    def execute(cls, rule, tau, k_neighbours, expansion_radius, rejection, resampling, lantern_delta,
                recheck=_DEFAULT_VERIFIER.recheck, recheck_scope=_DEFAULT_VERIFIER.recheck_scope) -> io.NodeOutput:
        check_choices(cls, rule=rule, rejection=rejection, resampling=resampling, recheck_scope=recheck_scope)
        return io.NodeOutput(VerifierConfig(rule=rule, tau=tau, k_neighbours=k_neighbours, expansion_radius=expansion_radius,
                                            rejection=rejection, resampling=resampling, lantern_delta=lantern_delta,
                                            lantern_k=LANTERN_K, recheck=recheck, recheck_scope=recheck_scope))
