"""Per-family MuLo-SD defaults: one table, the engine and the registry agree on which family a model is."""
from dataclasses import asdict

import pytest
import torch

from mulosd_core import engine, presets
from mulosd_core.models.registry import card_family, load_embedded
from mulosd_core.testing import tiny_model, tiny_vq


@pytest.mark.parametrize("family", ["scenes", "patterns", "paper"])
def test_mulo_islands_carries_the_family_settings(family):
    d = presets.mulo_defaults(family)
    m = presets.mulo_islands(family)
    v = m.verifier
    assert (v.tau, v.k_neighbours, v.expansion_radius, v.recheck, v.recheck_scope) == (
        d.tau, d.k_neighbours, d.expansion_radius, d.recheck, d.recheck_scope)
    assert (m.rows_per_step, m.parallel_window) == (d.rows_per_step, d.parallel_window)
    assert d.source


@pytest.mark.parametrize("family", [None, "llamagen", "no-such-family"])
def test_real_and_unknown_families_get_the_papers_settings(family):
    assert presets.mulo_defaults(family) == presets.MULO_DEFAULTS[presets.PAPER]
    assert presets.MULO_DEFAULTS[presets.PAPER].recheck == 0   # the paper's verifier has no recheck


def test_overrides_win_over_the_family_settings():
    assert presets.mulo_verifier("patterns", tau=0.7).tau == 0.7


def test_paper_preset_is_the_paper_settings_whatever_the_family():
    for family in ("scenes", "patterns"):
        assert asdict(presets.method_presets(family)["mulo_paper"][0]) == asdict(presets.mulo_islands(presets.PAPER))


def test_shipped_models_know_their_family():
    assert load_embedded("target").family == "scenes"
    assert load_embedded("drafter", family="patterns").family == "patterns"


def test_a_file_without_a_card_has_no_family(tmp_path):
    assert card_family(str(tmp_path / "gpt.safetensors")) is None
    (tmp_path / "family.json").write_text("{not json")
    with pytest.raises(Exception, match="family card is not readable JSON"):
        card_family(str(tmp_path / "gpt.safetensors"))


def test_generate_without_a_method_runs_the_targets_family_defaults(monkeypatch):
    vq = tiny_vq(0, 16)
    target, drafter = tiny_model(4, 1, vq=vq, dim=16), tiny_model(2, 3, vq=vq, dim=16)
    asked = []
    real = presets.mulo_islands

    def recording(family=None, **kw):
        asked.append(family)
        return real(family, **kw)

    monkeypatch.setattr(presets, "mulo_islands", recording)
    for family in (None, "patterns"):
        target.family = family
        engine.generate(target, torch.tensor([1]), drafter=drafter, seed=0, decode=False)
    assert asked == [None, "patterns"]


def test_bare_configs_default_to_the_papers_verifier():
    """VerifierConfig() and MethodConfig() carry the paper's settings (MULO_DEFAULTS['paper']) except the
    drafting window, which a bare MethodConfig leaves sequential (0) because it also serves SD and LANTERN."""
    paper, bare = presets.mulo_islands(presets.PAPER), engine.MethodConfig()
    assert asdict(bare.verifier) == asdict(paper.verifier)
    assert (bare.rows_per_step, bare.upsampler) == (paper.rows_per_step, paper.upsampler)
    assert (bare.parallel_window, paper.parallel_window) == (0, presets.MULO_DEFAULTS[presets.PAPER].parallel_window)


def test_self_drafting_takes_the_familys_self_entry_where_there_is_one(monkeypatch):
    """MULO_DEFAULTS['<family>/self'] when the target drafts for itself, else the family's own settings."""
    assert presets.mulo_defaults("patterns", self_drafting=True) == presets.mulo_defaults("patterns")
    assert presets.mulo_defaults(None, self_drafting=True) == presets.MULO_DEFAULTS[presets.PAPER]
    own = presets.MuloDefaults(tau=0.2, k_neighbours=4, expansion_radius=0, rows_per_step=8, parallel_window=3,
                               recheck=0, recheck_scope="drafts", source="test")
    monkeypatch.setitem(presets.MULO_DEFAULTS, "patterns/self", own)
    assert presets.mulo_defaults("patterns", self_drafting=True) is own
    m = presets.mulo_islands("patterns", self_drafting=True)
    assert (m.verifier.tau, m.verifier.k_neighbours, m.parallel_window) == (0.2, 4, 3)
    assert presets.method_presets("patterns")["mulo_self"][0] == m
    assert presets.method_presets("patterns")["mulo_self_pair_defaults"][0] == presets.mulo_islands("patterns")


def test_generate_without_a_method_knows_a_self_drafter(monkeypatch):
    from mulosd_core.models.llamagen import self_drafter

    vq = tiny_vq(0, 16)
    target, other = tiny_model(4, 1, vq=vq, dim=16), tiny_model(2, 3, vq=vq, dim=16)
    own = self_drafter(target, 2)
    assert presets.drafts_for_itself(target, own) and not presets.drafts_for_itself(target, other)
    assert not presets.drafts_for_itself(target, None)
    asked, real = [], presets.mulo_islands

    def recording(family=None, **kw):
        asked.append(kw.get("self_drafting"))
        return real(family, **kw)

    monkeypatch.setattr(presets, "mulo_islands", recording)
    for drafter in (own, other):
        engine.generate(target, torch.tensor([1]), drafter=drafter, seed=0, decode=False)
    assert asked == [True, False]


def test_a_missing_tier_preset_is_refused_with_the_families_that_have_one():
    import pytest
    from mulosd_core import presets as P
    with pytest.raises(ValueError, match="no 'indistinguishable' preset for family 'patterns'"):
        P.mulo_defaults("patterns", tier=P.INDISTINGUISHABLE)
