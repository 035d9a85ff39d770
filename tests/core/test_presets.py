"""Per-family MuLo-SD defaults: one table, the engine and the registry agree on which family a model is."""
from dataclasses import asdict

import pytest
import torch

from mulosd_core import decode, presets
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


def test_resolve_gives_the_targets_family_defaults():
    vq = tiny_vq(0, 16)
    target, drafter, same = tiny_model(4, 1, vq=vq, dim=16), tiny_model(2, 3, vq=vq, dim=16), tiny_model(4, 2, vq=vq, dim=16)
    for family in (None, "patterns", "scenes"):
        target.family = family
        assert presets.resolve(target, drafter) == presets.mulo_islands(family)
    target.family = "scenes"
    assert presets.resolve(target, drafter, quality="fastest") == presets.mulo_islands("scenes", tier="fastest")
    sd = presets.resolve(target, same)     # a same-resolution drafter: sequential drafts of SD_DRAFT_LEN tokens
    assert (sd.parallel_window, sd.draft_len) == (0, presets.SD_DRAFT_LEN)
    given = presets.resolve(target, drafter, parallel_window=0, rows_per_step=3)
    assert (given.parallel_window, given.rows_per_step) == (0, 3)
    assert given.verifier == presets.mulo_verifier("scenes")
    assert presets.resolve(target, None).method == "ar"
    decode.generate(target, torch.tensor([1]), method=presets.resolve(target, drafter), drafter=drafter, decode=False)


def test_generate_needs_a_complete_method():
    vq = tiny_vq(0, 16)
    target = tiny_model(4, 1, vq=vq, dim=16)
    with pytest.raises(TypeError, match="presets.resolve"):
        decode.generate(target, torch.tensor([1]))


def test_bare_configs_default_to_the_papers_verifier():
    """VerifierConfig() and MethodConfig() carry the paper's settings (MULO_DEFAULTS['paper']) except the
    drafting window, which a bare MethodConfig leaves sequential (0) because it also serves SD and LANTERN."""
    paper, bare = presets.mulo_islands(presets.PAPER), decode.MethodConfig()
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


def test_resolve_knows_a_self_drafter():
    from mulosd_core.models.llamagen import self_drafter

    vq = tiny_vq(0, 16)
    target, other = tiny_model(4, 1, vq=vq, dim=16), tiny_model(2, 3, vq=vq, dim=16)
    own = self_drafter(target, 2)
    assert presets.drafts_for_itself(target, own) and not presets.drafts_for_itself(target, other)
    assert not presets.drafts_for_itself(target, None)
    target.family = "patterns"
    assert presets.resolve(target, own) == presets.mulo_islands("patterns", self_drafting=True)
    assert presets.resolve(target, other) == presets.mulo_islands("patterns")


def test_a_missing_tier_preset_is_refused_with_the_families_that_have_one():
    import pytest
    from mulosd_core import presets as P
    with pytest.raises(ValueError, match="no 'indistinguishable' preset for family 'patterns'"):
        P.mulo_defaults("patterns", tier=P.INDISTINGUISHABLE)
