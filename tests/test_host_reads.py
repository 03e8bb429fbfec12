"""Host synchronisation budget (counted by devtools.launches.HostReads on the CPU; on a GPU
each read waits for every kernel queued before it): one read per training update, whatever the
architecture, and one per beam step."""
from __future__ import annotations

import pytest
import torch

from devtools.launches import HostReads
from nmtkit.decode import search
from nmtkit.models.fast import fusion
from nmtkit.text.vocab import UNK_ID
from tests.conftest import random_sources, tiny_context, tiny_model


@pytest.mark.parametrize("arch,fuse", [("rnnsearch", "off"), ("rnnencdec", "off"), ("lstm-attention", "off"),
                                       pytest.param("rnnsearch", "on", marks=[pytest.mark.skipif(
                                           not fusion.fusion_available("cpu")[0], reason="no C++ compiler"),
                                           pytest.mark.slow])])  # compiling: 10-15 s each
@pytest.mark.parametrize("update_freq", [1, 3])
def test_a_training_update_reads_the_device_once(data_dir, tmp_path, update_freq, arch, fuse, caplog):
    # fused too: the counting mode must not stop the compiled step bodies from compiling
    import torch._dynamo

    from nmtkit.train.context import train_step

    torch._dynamo.reset()  # this test's graphs only: earlier tests' graphs count towards the recompile limit
    ctx = tiny_context(data_dir, tmp_path / "run", arch, update_freq=update_freq, label_smoothing=0.1,
                       valid_bleu_samples=0, fuse=fuse)
    try:
        plan = ctx.epoch_plan(1)
        with caplog.at_level("WARNING", logger="nmtkit.models.fast.fusion"):
            for u in range(4):
                with HostReads() as reads:
                    assert train_step(ctx, plan[u * update_freq : (u + 1) * update_freq])
                assert reads.count == 1, reads.calls  # the finiteness check of the gradient norm
        assert ctx.state.update == 4
        assert not [r.getMessage() for r in caplog.records if "unfused" in r.getMessage()]
    finally:
        ctx.close()




@pytest.mark.parametrize("beam", [1, 4])
def test_a_beam_search_step_reads_the_device_once(monkeypatch, beam):
    """Over searches where hypotheses end at many different steps, sentences retire, slots are
    compacted and lengths hit their limits, no step reads the device more than once."""
    model = tiny_model(seed=2)
    with torch.no_grad():  # peaked, varied distributions: EOS at many different steps
        model.W_o.weight.mul_(8.0)
        model.W_o.bias.normal_(0, 2.0)
    model.eval()
    per_step, finishing = [], [0]
    step = search._BeamSearch.step

    def counted(self, t):
        before = len(self.pending)
        with HostReads() as reads:
            out = step(self, t)
        per_step.append(reads.count)
        finishing[0] += len(self.pending) > before
        return out

    monkeypatch.setattr(search._BeamSearch, "step", counted)
    src, lens = random_sources(seed=3, B=9, S=11)
    hyps = search.beam_search(model, src, lens, beam=beam, max_len_a=1.0, max_len_b=3, need_attention=True)
    assert all(len(h) == 1 for h in hyps)
    assert len(per_step) > 5 and finishing[0] >= 3, (per_step, finishing)
    assert max(per_step) == 1, per_step


def test_ban_unk_never_emits_the_unknown_word():
    model = tiny_model(seed=5)
    with torch.no_grad():  # make UNK the most probable word everywhere
        model.W_o.bias.zero_()
        model.W_o.bias[UNK_ID] = 50.0
    model.eval()
    src, lens = random_sources(seed=3, B=9, S=11)
    free = search.beam_search(model, src, lens, beam=3, max_len_a=1.0, max_len_b=3)
    assert any(UNK_ID in h[0].tokens for h in free)  # the test can fail
    for beam in (1, 3):
        banned = search.beam_search(model, src, lens, beam=beam, max_len_a=1.0, max_len_b=3, ban_unk=True, nbest=1)
        assert all(UNK_ID not in h.tokens for nb in banned for h in nb)
    greedy = search.greedy_search(model, src, lens, max_len=5, ban_unk=True)
    assert all(UNK_ID not in h.tokens for h in greedy)


def test_host_reads_count_the_reads_of_the_runs_device_only():
    # on a CUDA run, reading a host tensor waits for nothing: the packed encoder reads its batch
    # sizes (planned on the host) inside nn.GRU, which a GPU run counted as a second read
    from nmtkit.models.base import run_packed

    rnn = torch.nn.GRU(4, 5, batch_first=True, bidirectional=True)
    emb, lens = torch.randn(3, 6, 4), torch.tensor([6, 3, 2])
    with HostReads() as cpu_run, HostReads("cuda") as cuda_run:
        run_packed(rnn, emb, lens)
        assert bool(lens.sum() > 0) and lens[lens > 2].numel() == 2
    assert cpu_run.count == 3 and cpu_run.calls["__bool__"] == 1 and cpu_run.calls["__getitem__"] == 1
    assert cuda_run.count == 0
