"""Weight streaming (mulosd_core.offload) on tiny models, CPU.

On the CPU the "compute device" is the CPU too, but every fetch still makes a fresh copy, so
these tests see the mechanism itself: which tensors a block computes with while it runs, what
stays behind afterwards, and that outputs and MuLo-SD samples do not change. The memory saving
itself needs a GPU (the CUDA test at the end).
"""
from __future__ import annotations

import pytest
import torch

from mulosd_core import offload
from mulosd_core.decode import MethodConfig, VerifierConfig, generate
from mulosd_core.offload import choose_weights, resident_weights, stream_weights
from mulosd_core.sampling import SamplingConfig
from mulosd_core.testing import tiny_model, tiny_vq
from mulosd_core.upsample import UpsamplerConfig

CPU, GPU = torch.device("cpu"), torch.device("cuda")
MB = 1 << 20


@pytest.fixture
def pair():
    vq = tiny_vq(0, 16)
    return tiny_model(4, 1, vq=vq, dim=16), tiny_model(2, 3, vq=vq, dim=16)


class CountingCopy:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, t, dev):
        self.n += 1
        return t.to(dev, copy=True)


def forward_all(model, labels=torch.tensor([1, 3])):
    cache = model.new_cache(len(labels))
    first = model.prefill(model.condition_rows(labels, cfg=False), cache)
    positions = torch.arange(model.num_tokens, device=model.device)
    tokens = positions.remainder(model.vocab_size)[None].repeat(len(labels), 1)
    rest = model.forward_tokens(tokens, positions, cache)
    return torch.cat([first[:, None], rest], 1)


# --------------------------------------------------------------------------- the policy
@pytest.mark.parametrize("mode, device, weights, free, expected", [
    ("auto", CPU, 10 * MB, 1 * MB, "resident"),          # on the CPU nothing streams
    ("stream from cpu", CPU, 10 * MB, None, "resident"),
    ("on device", GPU, 10 * MB, 1 * MB, "resident"),      # the user's call, even if it will not fit
    ("stream from cpu", GPU, 1 * MB, 100 * MB, "stream"),
    ("auto", GPU, 10 * MB, 100 * MB, "resident"),
    ("auto", GPU, 80 * MB, 100 * MB, "stream"),           # would leave less than the reserve
    ("auto", GPU, 80 * MB, None, "resident"),             # free memory unknown: do not guess
])
def test_choose_weights(mode, device, weights, free, expected):
    assert choose_weights(mode, device, weights, free) == expected


def test_choose_weights_names_the_bad_mode():
    with pytest.raises(ValueError, match=r"weights: expected one of .*'stream from cpu'.* got 'gpu'"):
        choose_weights("gpu", GPU, 1, 1)


# --------------------------------------------------------------------------- the mechanism
def test_streamed_blocks_compute_with_copies_and_let_them_go(pair):
    target, _ = pair
    before = forward_all(target)
    counter = CountingCopy()
    streamer = stream_weights(target, CPU, copy=counter)
    homes = {id(p): p.data for b in streamer.blocks for p in b.parameters()}
    seen = []

    def watch(block, args, output):  # runs before the streamer drops the block: sees it mid-run
        seen.append(all(p.data.data_ptr() != homes[id(p)].data_ptr() for p in block.parameters()))

    watchers = [b.register_forward_hook(watch, prepend=True) for b in streamer.blocks]
    after = forward_all(target)
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    assert seen and all(seen)                         # every block ran on fetched copies
    for b in streamer.blocks:                         # and went home after
        assert all(p.data.data_ptr() == homes[id(p)].data_ptr() for p in b.parameters())
    tensors_per_block = len(list(streamer.blocks[0].parameters())) + len(list(streamer.blocks[0].buffers()))
    assert counter.n == 2 * len(streamer.blocks) * tensors_per_block  # prefill + one chunk
    for w in watchers:
        w.remove()
    assert "stream from the cpu" in offload.weights_report(target)
    resident_weights(target)
    n = counter.n
    torch.testing.assert_close(forward_all(target), before, rtol=0, atol=0)
    assert counter.n == n and not offload.is_streamed(target)  # hooks are gone
    assert "stream" not in offload.weights_report(target)


def test_a_failed_forward_leaves_no_block_behind(pair):
    target, _ = pair
    before = forward_all(target)
    streamer = stream_weights(target, CPU)
    block = streamer.blocks[-1]
    original = block.forward

    def boom(*args, **kwargs):
        raise RuntimeError("simulated out of memory")

    block.forward = boom
    with pytest.raises(RuntimeError, match="simulated"):
        forward_all(target)
    assert streamer._live == {id(block)}       # the failed block is still fetched ...
    block.forward = original
    torch.testing.assert_close(forward_all(target), before, rtol=0, atol=0)
    assert streamer._live == set()             # ... and dropped by the next call
    streamer.drop_all()
    resident_weights(target)


def test_stream_weights_is_idempotent(pair):
    target, _ = pair
    s = stream_weights(target, CPU)
    assert stream_weights(target, CPU) is s
    resident_weights(target)
    resident_weights(target)  # no-op when not streamed


def test_mulo_sd_samples_the_same_with_a_streamed_target(pair):
    target, drafter = pair
    method = MethodConfig(method="speculative", upsampler=UpsamplerConfig(kind="nearest"),
                          verifier=VerifierConfig(rule="mulo", tau=0.3, k_neighbours=2))
    sampling = SamplingConfig(cfg_scale=2.0, temperature=1.0, top_k=8)
    labels = torch.tensor([0, 5])
    plain = generate(target, labels, sampling, method, drafter=drafter, seed=7, decode=False)
    stream_weights(target, CPU)
    stream_weights(drafter, CPU)
    try:
        streamed = generate(target, labels, sampling, method, drafter=drafter, seed=7, decode=False)
    finally:
        resident_weights(target)
        resident_weights(drafter)
    assert torch.equal(streamed.tokens, plain.tokens)
    assert streamed.stats.target_calls == plain.stats.target_calls


def test_streaming_takes_the_blocks_the_model_declares():
    """offload reaches a model only through the protocol (weight_blocks, weights_module, streamer)."""
    target = tiny_model(4, 0)
    streamer = offload.stream_weights(target, torch.device("cpu"))
    try:
        assert target.streamer is streamer and streamer.blocks == target.weight_blocks() == list(target.gpt.layers)
        assert offload.is_streamed(target) and "stream from the cpu" in offload.weights_report(target)
    finally:
        offload.resident_weights(target)
    assert target.streamer is None and not offload.is_streamed(target)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the saving is GPU memory")
def test_streaming_frees_gpu_memory_and_keeps_outputs():
    model = tiny_model(8, 0, dim=256, n_layer=8)
    expected = forward_all(model)
    model.gpt.to("cuda")
    model.vq.to("cuda")
    torch.cuda.synchronize()
    resident = torch.cuda.memory_allocated()
    streamer = stream_weights(model, GPU)
    streamed = torch.cuda.memory_allocated()
    assert resident - streamed >= 0.9 * sum(offload.module_bytes(b) for b in streamer.blocks)
    torch.testing.assert_close(forward_all(model).cpu(), expected, rtol=1e-4, atol=1e-4)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - streamed < streamer.block_bytes  # nothing left fetched
    resident_weights(model)
