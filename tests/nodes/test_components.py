"""Upsampler and Local Verifier: defaults are the shipped presets; outputs are the core's configs."""
from mulosd_core import presets
from mulosd_core.decode import VerifierConfig
from mulosd_core.upsample import UpsamplerConfig


def defaults(cls):
    return {i.id: i.default for i in cls.GET_SCHEMA().inputs}


def test_verifier_defaults_are_the_presets(pack):
    from mulosd_pack.nodes.components import MuLoSDLocalVerifier

    out = MuLoSDLocalVerifier.execute(**defaults(MuLoSDLocalVerifier)).result[0]
    assert isinstance(out, VerifierConfig)
    assert out == presets.mulo_verifier(lantern_delta=presets.LANTERN_DELTA, lantern_k=presets.LANTERN_K)
    assert out == presets.mulo_islands().verifier


def test_verifier_ablation_settings(pack):
    from mulosd_pack.nodes.components import MuLoSDLocalVerifier

    kw = defaults(MuLoSDLocalVerifier) | {"k_neighbours": 1, "rejection": "raster"}
    out = MuLoSDLocalVerifier.execute(**kw).result[0]
    assert (out.k_neighbours, out.rejection, out.tau) == (1, "raster", presets.MULO_TAU)


def test_verifier_recheck_input(pack):
    import pytest

    from mulosd_pack.nodes.components import MuLoSDLocalVerifier

    assert defaults(MuLoSDLocalVerifier)["recheck"] == presets.MULO_RECHECK
    out = MuLoSDLocalVerifier.execute(**(defaults(MuLoSDLocalVerifier) | {"recheck": 4})).result[0]
    assert out.recheck == 4 and out.recheck_scope == presets.MULO_RECHECK_SCOPE
    out = MuLoSDLocalVerifier.execute(**(defaults(MuLoSDLocalVerifier) | {"recheck": 4, "recheck_scope": "all"})).result[0]
    assert (out.recheck, out.recheck_scope) == (4, "all")
    with pytest.raises(ValueError, match=r"recheck_scope: expected one of \[.drafts., .all.\], got .everything."):
        MuLoSDLocalVerifier.execute(**(defaults(MuLoSDLocalVerifier) | {"recheck_scope": "everything"}))
    with pytest.raises(ValueError, match="recheck needs a deterministic rule that can be repeated"):
        MuLoSDLocalVerifier.execute(**(defaults(MuLoSDLocalVerifier) | {"recheck": 4, "rule": "exact"}))


def test_upsampler_defaults_and_ratio(pack):
    from mulosd_pack.nodes.components import MuLoSDUpsampler

    assert MuLoSDUpsampler.execute(**defaults(MuLoSDUpsampler)).result[0] == UpsamplerConfig()
    out = MuLoSDUpsampler.execute(kind="nearest", ratio=2, filter="area").result[0]
    assert out == UpsamplerConfig(kind="nearest", ratio=2, filter="area")


def test_tau_range_matches_the_rule(pack):
    from mulosd_pack.nodes.components import MuLoSDLocalVerifier

    tau = next(i for i in MuLoSDLocalVerifier.GET_SCHEMA().inputs if i.id == "tau")
    assert (tau.min, tau.max) == (0.0, 1.0)


def test_the_rule_tooltip_reads_the_rule_table():
    from mulosd_core.decode import RULES
    from mulosd_pack.nodes.components import RULE_TOOLTIP
    for name, rule in RULES.items():
        assert rule.name == name and rule.description and f"{name}: {rule.description}" in RULE_TOOLTIP
