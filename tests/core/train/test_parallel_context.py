"""The parallel-drafting layout is exact: one masked forward gives the logits the KV-cache replay of
the drafting schedule gives (what the engine's _draft_parallel computes), so training on it is
teacher forcing on the drafter's real contexts."""
import pytest
import torch

from mulosd_core.schedules import parallel_draft_layout, parallel_draft_schedule
from mulosd_core.testing import tiny_gpt, tiny_model
from mulosd_core.train.parallel_context import parallel_logits


def _replay(model, tokens, cond, window) -> torch.Tensor:
    """Run the schedule through the model's cache as the engine does, teacher-forced on `tokens`."""
    W = model.grid
    rows = model.condition_rows(cond, False, None)
    cache = model.new_cache(rows.rows)
    out = torch.empty(tokens.shape[0], W * W, model.vocab_size)
    out[:, 0] = model.prefill(rows, cache)
    for step in parallel_draft_schedule(W, W, window):
        feeds = [(src, at) for src, at in step.fed if at >= 0]
        if not feeds:
            continue
        src = torch.tensor([max(s, 0) for s, _ in feeds])   # no context: the engine's proxy is position 0
        at = torch.tensor([a for _, a in feeds])
        lg = model.forward_tokens(tokens[:, src], at, cache)
        index = {a: i for i, (_, a) in enumerate(feeds)}
        for fi, pos in step.sampled:
            if step.fed[fi][1] >= 0:
                out[:, pos] = lg[:, index[step.fed[fi][1]]]
    return out


@pytest.mark.parametrize("grid,window,layers", [(4, 1, None), (4, 2, 1), (6, 3, None), (6, 6, 1)])
def test_layout_logits_match_the_cache_replay(grid, window, layers):
    model = tiny_model(grid=grid, n_layer=2).at_grid(grid, layers=layers)   # layers=1: an early exit
    g = torch.Generator().manual_seed(grid * 10 + window)
    tokens = torch.randint(0, model.vocab_size, (3, grid * grid), generator=g)
    cond = torch.tensor([1, 4, 7])
    with torch.no_grad():
        want = _replay(model, tokens, cond, window)
        got = parallel_logits(model.gpt, tokens, cond, grid, window, layers=model.exit_layers)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_layout_samples_every_position_once():
    for W, window in [(8, 2), (8, 3), (8, 4), (5, 1)]:
        lay = parallel_draft_layout(W, window)
        assert sorted(t for t in lay.target if t >= 0) == list(range(1, W * W))
        assert all(e in seen and max(seen) == e for e, seen in enumerate(lay.sees))   # sees itself, nothing later


def test_a_t2i_model_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="expected a c2i model .* got a t2i model"):
        parallel_logits(tiny_gpt(model_type="t2i"), torch.zeros(1, 16, dtype=torch.long), torch.zeros(1, 7, 24), 4, 2)
