"""generate checks the condition and the pair before any model runs, with errors that name the input."""
import pytest
import torch

from mulosd_core.decode import engine as decode_engine
from mulosd_core.conditions import check_condition
from mulosd_core.decode import MethodConfig, VerifierConfig, generate
from mulosd_core.testing import tiny_model, tiny_vq


@pytest.fixture(scope="module")
def c2i():
    vq = tiny_vq(0, 16)
    return tiny_model(4, 1, vq=vq, dim=16), tiny_model(2, 3, vq=vq, dim=16)


@pytest.fixture(scope="module")
def t2i():
    return tiny_model(4, 2, vq=tiny_vq(0, 16), dim=16, model_type="t2i")


@pytest.fixture
def no_model_runs(monkeypatch):
    monkeypatch.setattr(decode_engine, "_run", lambda *a, **k: pytest.fail("a model ran before validation"))


@pytest.mark.parametrize("cond,match", [
    (torch.tensor([0, 10]), r"^class_id: expected 0\.\.9 \(.* has 10 classes\), got 10$"),
    (torch.tensor([-1]), r"^class_id: expected 0\.\.9 .*got -1$"),
    (torch.tensor([1.5]), r"^class_id: expected whole numbers .*float"),
    ("cat", r"^class_id: expected class ids"),
])
def test_bad_class_ids_are_named(c2i, no_model_runs, cond, match):
    with pytest.raises(ValueError, match=match):
        generate(c2i[0], cond, method=MethodConfig(method="ar"))
    with pytest.raises(ValueError, match=match):
        generate(c2i[0], cond, method="speculative", drafter=c2i[1])


def test_bad_captions_are_named(t2i, no_model_runs):
    T, C = t2i.cond_len, t2i.gpt.config.caption_dim
    ar = MethodConfig(method="ar")
    with pytest.raises(ValueError, match=rf"^conditioning: target .* expects {T} caption tokens of width {C} .*got {T} x 5; "
                                         r"were the captions encoded by another text encoder\?$"):
        generate(t2i, torch.zeros(1, T, 5), method=ar)
    with pytest.raises(ValueError, match=r"^conditioning: target .* text-to-image \(t2i\) model and expects caption features"):
        generate(t2i, torch.tensor([3]), method=ar)
    with pytest.raises(ValueError, match=r"^conditioning: the caption mask must be \[B, T\]"):
        generate(t2i, torch.zeros(2, T, C), method=ar, mask=torch.ones(1, T))


def test_pair_errors_are_prefixed_and_come_first(c2i, t2i, no_model_runs):
    target, drafter = c2i
    with pytest.raises(ValueError, match=r"^drafter/target: .*c2i.*t2i"):
        generate(t2i, torch.zeros(1, t2i.cond_len, t2i.gpt.config.caption_dim), method="speculative", drafter=drafter)
    with pytest.raises(ValueError, match=r"^drafter/target: .*larger than the target"):
        generate(drafter, torch.tensor([1]), method="speculative", drafter=target)
    exact = MethodConfig(verifier=VerifierConfig(rule="exact", rejection="raster"))
    with pytest.raises(ValueError, match=r"^drafter/target: acceptance rule 'exact' needs"):
        generate(target, torch.tensor([1]), method=exact, drafter=drafter)
    with pytest.raises(ValueError, match=r"^drafter: the speculative method \(MuLo-SD\) needs a drafter "
                                         r"model; got none\. Pass drafter=.*or sample with the target alone: one of \['ar'"):
        generate(target, torch.tensor([1]), method="speculative")


def test_the_advice_without_a_drafter_works_as_written(c2i):
    """Issue 37: the error names method="ar", and generate takes a method by its name."""
    target = c2i[0]
    named = generate(target, torch.tensor([1]), method="ar", seed=3, decode=False)
    full = generate(target, torch.tensor([1]), method=MethodConfig(method="ar"), seed=3, decode=False)
    assert named.stats.method == "ar" and torch.equal(named.tokens, full.tokens)
    with pytest.raises(ValueError, match=r"method must be one of .*got 'fast'"):
        generate(target, torch.tensor([1]), method="fast")
    with pytest.raises(TypeError, match=r"^method: expected a MethodConfig or a method name .*, got int; presets.resolve"):
        generate(target, torch.tensor([1]), method=3)


def test_a_plain_int_class_is_one_image_of_that_class(c2i):
    """Issue 37: generate(target, 3) raised a raw TypeError (len of an int)."""
    target = c2i[0]
    one = generate(target, 3, method="ar", seed=4, decode=False)
    listed = generate(target, [3], method="ar", seed=4, decode=False)
    assert one.tokens.shape == (1, target.num_tokens) and torch.equal(one.tokens, listed.tokens)
    assert check_condition(target, 3) == 1 and check_condition(target, torch.tensor(3)) == 1
    assert check_condition(target, [1, 2, 3]) == 3


@pytest.mark.parametrize("cond,match", [("3", r"^class_id: expected class ids \(integers\) .*got str$"),
                                        (3.0, r"^class_id: expected whole numbers"),
                                        ([], r"^class_id: expected at least one class id .*got none$")])
def test_a_class_of_another_type_is_refused_naming_the_expected_one(c2i, no_model_runs, cond, match):
    with pytest.raises(ValueError, match=match):
        generate(c2i[0], cond, method="ar")


def test_a_good_condition_passes(c2i, t2i):
    check_condition(c2i[0], torch.tensor([0, 9]))
    check_condition(t2i, torch.zeros(2, t2i.cond_len, t2i.gpt.config.caption_dim), torch.ones(2, t2i.cond_len))
    res = generate(c2i[0], torch.tensor([2]), method=MethodConfig(method="ar"), decode=False)
    assert res.tokens.shape == (1, 16)


def test_an_unknown_model_kind_is_named(c2i):
    class Odd:
        name, model_type = "odd", "v2i"
    with pytest.raises(ValueError, match=r"^drafter: expected a c2i, t2i or Janus-Pro model, got 'odd', a v2i model$"):
        check_condition(Odd(), torch.tensor([0]), role="drafter")
