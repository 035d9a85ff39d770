"""The rule table (decode.rules): each rule one entry, read by the configs, the pair check, the methods and
the Local Verifier; pool_greedy was added as a single entry to show it."""
import pytest
import torch

from mulosd_core.decode import RULES, MethodConfig, VerifierConfig, check_pair, generate
from mulosd_core.decode.rules import Tables, rule_names
from mulosd_core.sampling import SamplingConfig
from mulosd_core.testing import tiny_model, tiny_vq

GREEDY = SamplingConfig(cfg_scale=1.0, temperature=0.0)


@pytest.fixture(scope="module")
def pair():
    vq = tiny_vq(0, 16)
    return tiny_model(4, 1, vq=vq, dim=16), tiny_model(2, 3, vq=vq, dim=16)


def test_pool_greedy_accepts_when_the_targets_argmax_is_in_the_drafts_pool():
    neighbours = torch.tensor([[0, 1], [1, 2], [2, 0]])        # code v's pool: v and one neighbour
    probs = torch.tensor([[[0.1, 0.7, 0.2], [0.1, 0.7, 0.2], [0.1, 0.7, 0.2]]])
    draft = torch.tensor([[0, 1, 2]])
    accepted, aux = RULES["pool_greedy"].test(Tables(neighbours=neighbours), VerifierConfig(), probs, draft, None, None)
    assert accepted.tolist() == [[True, True, False]] and aux is None


def test_pool_greedy_with_a_pool_of_one_is_the_greedy_rule(pair):
    target, drafter = pair
    runs = {}
    for rule in ("greedy", "pool_greedy"):
        method = MethodConfig(verifier=VerifierConfig(rule=rule, k_neighbours=1, recheck=2), parallel_window=2, rows_per_step=2)
        runs[rule] = generate(target, torch.tensor([1, 4]), GREEDY, method, drafter, seed=0, decode=False)
    assert torch.equal(runs["greedy"].tokens, runs["pool_greedy"].tokens)
    assert runs["greedy"].stats.accepted == runs["pool_greedy"].stats.accepted


def test_the_configs_and_the_pair_check_read_the_table(pair):
    target, drafter = pair
    with pytest.raises(ValueError, match=", ".join(rule_names(lambda r: r.repeatable))):
        VerifierConfig(rule="lantern", recheck=1)
    with pytest.raises(ValueError, match="rules with a pool: mulo"):
        VerifierConfig(rule="greedy", commit="pool")
    for name in rule_names(lambda r: r.needs_q):
        with pytest.raises(ValueError, match=f"acceptance rule '{name}' needs the probability of each draft"):
            check_pair(target, drafter, MethodConfig(verifier=VerifierConfig(rule=name, rejection="raster")))
    with pytest.raises(ValueError, match="rule must be one of"):
        VerifierConfig(rule="fast")


def test_sjd_runs_its_own_p_q_rules_and_falls_back_to_exact(pair):
    target, _ = pair
    sampling = SamplingConfig(cfg_scale=1.0, top_k=4)
    label = {rule: generate(target, torch.tensor([2]), sampling, MethodConfig(method="sjd", verifier=VerifierConfig(rule=rule)),
                            seed=1, decode=False) for rule in ("exact", "gsd", "mulo")}
    assert [label[r].stats.method for r in ("exact", "gsd", "mulo")] == ["sjd", "gsd", "sjd"]
    assert torch.equal(label["exact"].tokens, label["mulo"].tokens)   # mulo is no p/q test: SJD runs exact
