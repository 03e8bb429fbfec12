"""Properties every architecture must have (docs/design.md, conventions 3 and 9), on tiny float64 models."""
from __future__ import annotations

import dataclasses
from functools import partial

import pytest
import torch

from nmtkit.errors import ConfigError
from nmtkit.models import ARCHS, build_model, make_config
from nmtkit.train.presets import PRESETS, TRAIN_DEFAULTS, preset, resolve_model, train_defaults
from tests.conftest import TINY, random_batch, tiny_model
from tests.reference_models import plain_chunked_loss, rnnsearch_autograd_features

IMPLEMENTED = []
for _arch in ARCHS:
    try:
        build_model(_arch, TINY[_arch])
        IMPLEMENTED.append(_arch)
    except (ImportError, AttributeError):
        pass


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_all_three_architectures_are_implemented():
    assert IMPLEMENTED == list(ARCHS)


@pytest.mark.parametrize("arch", IMPLEMENTED + ["rnnsearch-readout-new"])
def test_forward_equals_loop_of_step(arch):
    model = tiny_model("rnnsearch", readout="new", exact=True) if arch == "rnnsearch-readout-new" else tiny_model(arch, exact=True)
    src, src_lens, tgt_in, tgt_out, _ = random_batch()
    with torch.no_grad():
        full = model(src, src_lens, tgt_in)  # (B, T, V)
        enc = model.encode(src, src_lens)
        feats, attn_full = model.decode_features(enc, tgt_in)
        state = model.init_state(enc)
        steps, attns = [], []
        for t in range(tgt_in.size(1)):
            lp, state, attn = model.step(tgt_in[:, t], state, enc)
            steps.append(lp)
            attns.append(attn)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-12, rtol=1e-12)
    if attn_full is not None:
        torch.testing.assert_close(torch.stack(attns, 1), attn_full, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("readout", ["prev", "new"])
def test_rnnsearch_decoding_steps_average_c_o_h_once_per_sentence_instead_of_projecting_each_context(readout):
    """Steps over `encode_for_steps` (C_o h_j made once per sentence, C_o c_i a weighted sum of
    them) give teacher forcing's log-probabilities to float64 rounding, with one state row per
    sentence and with beam search's G rows per sentence, and run no C_o product."""
    model = tiny_model("rnnsearch", readout=readout, exact=True)
    src, src_lens, tgt_in, _, _ = random_batch()
    calls = []
    with torch.no_grad():
        full = model(src, src_lens, tgt_in)  # (B, T, V)
        enc = model.encode_for_steps(src, src_lens)
        model.C_o.register_forward_hook(lambda *_: calls.append(1))
        G = 3
        state, grouped = model.init_state(enc), None
        for t in range(tgt_in.size(1)):
            if grouped is None:
                grouped = state.repeat_interleave(G, 0)
            lp, state, _ = model.step(tgt_in[:, t], state, enc)
            lp_g, grouped, _ = model.step(tgt_in[:, t].repeat_interleave(G), grouped, enc)
            torch.testing.assert_close(lp, full[:, t], atol=1e-12, rtol=1e-12)
            torch.testing.assert_close(lp_g, full[:, t].repeat_interleave(G, 0), atol=1e-12, rtol=1e-12)
    assert enc.step_values is not None and not calls


def test_rnnencdec_decoding_steps_project_the_summary_once_per_sentence():
    """Steps over `encode_for_steps` (C c and C_o c made once per sentence) give teacher
    forcing's log-probabilities to float64 rounding and run neither C nor C_o."""
    model = tiny_model("rnnencdec", exact=True)
    src, src_lens, tgt_in, _, _ = random_batch()
    calls = []
    with torch.no_grad():
        full = model(src, src_lens, tgt_in)
        enc = model.encode_for_steps(src, src_lens)
        for layer in (model.C, model.C_o):
            layer.register_forward_hook(lambda *_: calls.append(1))
        state = model.init_state(enc)
        for t in range(tgt_in.size(1)):
            lp, state, _ = model.step(tgt_in[:, t], state, enc)
            torch.testing.assert_close(lp, full[:, t], atol=1e-12, rtol=1e-12)
    assert enc.summary_out is not None and not calls


@pytest.mark.parametrize("arch", [a for a in IMPLEMENTED if a != "rnnencdec"])
def test_attention_rows_sum_to_one_and_padding_gets_zero(arch):
    model = tiny_model(arch, exact=True)
    src, src_lens, tgt_in, _, _ = random_batch()
    with torch.no_grad():
        enc = model.encode(src, src_lens)
        _, attn = model.decode_features(enc, tgt_in)
    B, T, S = attn.shape
    extra = 1 if model.config.src_eos else 0
    assert S == src.size(1) + extra
    torch.testing.assert_close(attn.sum(-1), torch.ones(B, T, dtype=attn.dtype))
    for b in range(B):
        real = int(src_lens[b]) + extra
        assert torch.all(attn[b, :, real:] == 0)
        assert torch.all(attn[b, :, :real] > 0)


@pytest.mark.parametrize("arch", IMPLEMENTED)
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_chunked_loss_and_its_gradients_equal_autograd_through_the_log_softmax(arch, label_smoothing):
    model = tiny_model(arch, exact=True)
    src, src_lens, tgt_in, tgt_out, _ = random_batch()
    results = []
    for loss_fn in (model.loss, partial(plain_chunked_loss, model)):
        model.zero_grad()
        loss, nll, n = loss_fn(src, src_lens, tgt_in, tgt_out, label_smoothing, chunk_tokens=3)
        loss.backward()
        results.append((loss.detach(), nll.detach(), n, [p.grad.clone() for p in model.parameters()]))
    (l1, n1, c1, g1), (l2, n2, c2, g2) = results
    torch.testing.assert_close(l1, l2)
    torch.testing.assert_close(n1, n2)
    assert c1 == c2 == int(tgt_out.ne(0).sum())
    if label_smoothing > 0:
        assert not torch.isclose(l1, n1)  # smoothing changed the objective, not the NLL
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)


def test_the_plain_loss_smooths_labels_as_the_chunked_loss_does():
    """`Seq2Seq.loss`, the plain definition the chunked loss stands for, spreads the smoothing mass
    as the chunked loss does: ls times the mean over the vocabulary of -log p, not its sum."""
    from nmtkit.models.base import Seq2Seq

    model = tiny_model("rnnsearch", exact=True)
    src, src_lens, tgt_in, tgt_out, _ = random_batch()
    with torch.no_grad():
        plain = Seq2Seq.loss(model, src, src_lens, tgt_in, tgt_out, 0.1)
        chunked = model.loss(src, src_lens, tgt_in, tgt_out, 0.1, chunk_tokens=3)
    torch.testing.assert_close(plain[0], chunked[0])
    torch.testing.assert_close(plain[1], chunked[1])
    assert plain[2] == chunked[2]


@pytest.mark.parametrize("arch", IMPLEMENTED)
def test_index_select_and_reorder_follow_the_rows(arch):
    """Beam search's expand/reorder: stepping selected rows equals selecting rows of a step."""
    model = tiny_model(arch, exact=True)
    src, src_lens, tgt_in, _, _ = random_batch()
    index = torch.tensor([2, 0, 0, 3, 1])
    with torch.no_grad():
        enc = model.encode(src, src_lens)
        state = model.init_state(enc)
        lp, state1, attn = model.step(tgt_in[:, 0], state, enc)
        lp2, _, attn2 = model.step(tgt_in[:, 1], state1, enc)
        enc_sel = enc.index_select(index)
        lp_sel, state_sel, _ = model.step(tgt_in[index, 0], model.reorder(state, index), enc_sel)
        lp2_sel, _, attn2_sel = model.step(tgt_in[index, 1], model.reorder(state1, index), enc_sel)
    torch.testing.assert_close(lp_sel, lp[index])
    torch.testing.assert_close(lp2_sel, lp2[index])
    if attn2 is not None:
        torch.testing.assert_close(attn2_sel, attn2[index])


@pytest.mark.parametrize("arch", IMPLEMENTED)
def test_tiny_model_overfits_a_few_pairs(arch):
    torch.manual_seed(0)
    cfg = dict(TINY[arch], emb_dim=32, enc_hidden=32, dec_hidden=32)
    if "att_hidden" in cfg:
        cfg["att_hidden"] = 16
    if "maxout" in cfg:
        cfg["maxout"] = 16
    # each arch's default init (the paper's; lstm-attention's U(-0.1, 0.1), which at 16 units
    # still sits near the unigram loss after the 100 steps)
    model = build_model(arch, cfg)
    src, src_lens, tgt_in, tgt_out, _ = random_batch(seed=7)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    model.train()
    first = None
    for _ in range(100):
        opt.zero_grad()
        loss, _, n = model.loss(src, src_lens, tgt_in, tgt_out)
        (loss / n).backward()
        opt.step()
        first = first if first is not None else loss.item() / n
    last = loss.item() / n
    assert first > 2.0  # about log(13) at the start
    assert last < 0.1 * first, (first, last)


@pytest.mark.parametrize("arch", IMPLEMENTED)
def test_bf16_autocast_loss_is_close_and_grads_stay_float32(arch):
    torch.manual_seed(0)
    model = build_model(arch, dict(TINY[arch], init="default"))
    src, src_lens, tgt_in, tgt_out, _ = random_batch()
    loss32, _, _ = model.loss(src, src_lens, tgt_in, tgt_out)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss16, nll16, _ = model.loss(src, src_lens, tgt_in, tgt_out)
    assert loss16.dtype == torch.float32 and torch.isfinite(loss16)
    torch.testing.assert_close(loss16, loss32, rtol=0.03, atol=0.0)
    loss16.backward()
    for p in model.parameters():
        assert p.grad is None or p.grad.dtype == torch.float32


# ---- configs and presets ------------------------------------------------------------------


@pytest.mark.parametrize("arch", IMPLEMENTED)
def test_config_rebuilds_from_its_dict(arch):
    model = build_model(arch, TINY[arch])
    d = dataclasses.asdict(model.config)
    assert make_config(arch, d) == model.config
    model2 = build_model(arch, d)
    assert model2.config == model.config
    model2.load_state_dict(model.state_dict())  # same parameter names and shapes


@pytest.mark.parametrize("arch", IMPLEMENTED)
def test_unknown_config_key_is_an_error_listing_valid_keys(arch):
    with pytest.raises(ConfigError) as err:
        make_config(arch, dict(TINY[arch], hiden=3))
    assert "hiden" in str(err.value) and "dec_hidden" in str(err.value)


@pytest.mark.parametrize("arch", IMPLEMENTED)
@pytest.mark.parametrize("bad", [{"emb_dim": 0}, {"dec_hidden": -3}, {"dropout": 1.5}, {"init": "xavier"}])
def test_bad_config_values_are_config_errors(arch, bad):
    with pytest.raises(ConfigError):
        make_config(arch, dict(TINY[arch], **bad))


def test_unknown_arch_is_a_config_error():
    with pytest.raises(ConfigError, match="rnnsearch"):
        build_model("transformer", {})


def test_presets_match_the_paper_and_build():
    arch, cfg = preset("rnnsearch-50")
    assert arch == "rnnsearch"
    assert (cfg["emb_dim"], cfg["enc_hidden"], cfg["dec_hidden"], cfg["att_hidden"], cfg["maxout"]) == (
        620, 1000, 1000, 1000, 500)
    assert cfg["src_vocab_size"] == cfg["tgt_vocab_size"] == 30000
    assert train_defaults("rnnsearch-50")["max_len"] == 50
    assert train_defaults("rnnsearch-30")["max_len"] == 30
    assert train_defaults("rnnencdec-30")["max_len"] == 30
    assert train_defaults("rnnsearch-50")["batch_size"] == 80
    assert set(PRESETS) == set(TRAIN_DEFAULTS)
    for name in PRESETS:
        arch, cfg = preset(name)
        if arch in IMPLEMENTED:
            make_config(arch, cfg)
    arch, cfg = preset("small")
    cfg.update(src_vocab_size=20, tgt_vocab_size=30)
    model = build_model(arch, cfg)
    n_params = sum(p.numel() for p in model.parameters())
    assert 3_000_000 < n_params < 6_000_000  # without the big vocabularies
    assert preset("small")[1]["src_vocab_size"] == 8000  # the copy above did not leak back


def test_small_preset_takes_the_ablations_choices_and_the_paper_presets_stay_the_papers():
    """The ablation in docs/experiments.md: the small preset initialises every weight
    U(-0.1, 0.1), drops out only the deep output, reads s_i in it and keeps a moving average of
    its weights (decay 0.998); the paper presets keep the
    appendix's equations, initialisation and procedure."""
    arch, cfg = preset("small")
    assert (arch, cfg["init"], cfg["dropout"], cfg["maxout"], cfg["att_hidden"]) == ("rnnsearch", "uniform", 0.2, 256, 512)
    assert (cfg["dropout_sites"], cfg["readout"]) == ("out", "new")
    assert train_defaults("small") == dict(optimizer="adam", lr=1e-3, batch_size=64, clip_norm=1.0, max_len=50,
                                           precision="auto", ema_decay=0.998)
    for name in ("rnnsearch-30", "rnnsearch-50", "rnnencdec-30", "rnnencdec-50"):
        cfg = preset(name)[1]
        assert (cfg["init"], cfg["dropout"], cfg["emb_dim"], cfg["maxout"]) == ("paper", 0.0, 620, 500), name
        assert "dropout_sites" not in cfg and "readout" not in cfg  # the appendix's s_{i-1}
        if name.startswith("rnnsearch"):
            assert make_config(*preset(name)).readout == "prev"
        d = train_defaults(name)
        assert (d["optimizer"], d["adadelta_eps"], d["adadelta_rho"], d["batch_size"], d["sort_batches"]) == (
            "adadelta", 1e-6, 0.95, 80, 20), name


def test_lstm_attention_preset_takes_the_seeds_one_hidden_size_and_the_assignments_uniform_init():
    """Seed 003 has one h: W_h, W_attProj in R^{h x 2h}, u_t = [a_t ; h_t] in R^{3h}, so the decoder
    has as many units as each encoder direction; the assignment's run.py gives 256 for both and
    draws every parameter from U(-0.1, 0.1) (--uniform-init 0.1). The config's defaults are the preset's."""
    arch, cfg = preset("lstm-attention")
    assert (arch, cfg["emb_dim"], cfg["enc_hidden"], cfg["dec_hidden"], cfg["init"], cfg["dropout"]) == (
        "lstm-attention", 256, 256, 256, "uniform", 0.3)
    assert dataclasses.asdict(make_config(arch, dict(src_vocab_size=30000, tgt_vocab_size=30000))) == cfg | dict(src_eos=True)


def test_resolve_model_takes_the_presets_sizes_its_own_arch_and_each_sides_vocabulary():
    """A bare --arch lstm-attention is its preset's sizes, --arch naming the preset's own arch is no
    contradiction, and the source vocabulary sizes the source side."""
    arch, cfg = resolve_model("lstm-attention", None, {}, 100, 200)
    assert (arch, cfg["dropout"], cfg["init"], cfg["src_vocab_size"], cfg["tgt_vocab_size"]) == (
        "lstm-attention", 0.3, "uniform", 100, 200)
    assert resolve_model("rnnsearch", "small", {"emb_dim": 32}, 10, 20)[1]["emb_dim"] == 32


def test_unknown_preset_is_a_config_error():
    with pytest.raises(ConfigError, match="rnnsearch-50"):
        preset("rnnsearch-70")


@pytest.mark.parametrize("tgt_lens", [(4, 1, 3, 2), (1, 1, 1, 1), (0, 0, 0, 0)])
@pytest.mark.parametrize("readout", ["prev", "new"])
def test_rnnsearch_handwritten_recurrence_matches_autograd_loop(tgt_lens, readout):
    """recurrence.py's forward and hand-written backward equal autograd through the plain loop,
    with the deep output reading s_{i-1} or s_i (then s_T's gradient enters the backward)."""
    model = tiny_model("rnnsearch", seed=2, readout=readout, exact=True)
    src, src_lens, tgt_in, _, _ = random_batch(tgt_lens=tgt_lens)
    results = []
    for features in (model.decode_features, partial(rnnsearch_autograd_features, model)):
        model.zero_grad()
        feats, attn = features(model.encode(src, src_lens), tgt_in)
        w_f = torch.sin(torch.arange(feats.numel(), dtype=feats.dtype)).view_as(feats)
        w_a = torch.cos(torch.arange(attn.numel(), dtype=attn.dtype)).view_as(attn)
        ((feats * w_f).sum() + (attn * w_a).sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((feats.detach(), attn.detach(), grads))
    (f1, a1, g1), (f2, a2, g2) = results
    torch.testing.assert_close(f1, f2, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(a1, a2, atol=1e-12, rtol=1e-12)
    assert len(g2) > 10
    for name, g in g2.items():
        torch.testing.assert_close(g1[name], g, atol=1e-12, rtol=1e-10, msg=name)


def test_rnnsearch_recurrence_without_grad_keeps_no_per_step_activations(monkeypatch):
    """Dev loss runs under no_grad on long sentences: the forward-only path gives the training
    path's numbers and never allocates the (T, B, S, n') tanh activations backward would need."""
    import nmtkit.models.fast.recurrence as rec

    model = tiny_model("rnnsearch", seed=3, exact=True)
    src, src_lens, tgt_in, _, _ = random_batch(tgt_lens=(5, 2, 4, 3))
    feats, attn = model.decode_features(model.encode(src, src_lens), tgt_in)
    kept = []
    real_forward = rec._forward

    def spy(*args, keep):
        out = real_forward(*args, keep=keep)
        kept.append(keep)
        return out

    monkeypatch.setattr(rec, "_forward", spy)
    with torch.no_grad():
        f0, a0 = model.decode_features(model.encode(src, src_lens), tgt_in)
    assert kept == [False]
    torch.testing.assert_close(f0, feats.detach(), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(a0, attn.detach(), atol=1e-12, rtol=1e-12)


def test_rnnsearch_recurrence_keeps_for_backward_nothing_of_size_steps_by_source_by_attention():
    """The hand-written backward recomputes the attention's tanh activations: what the
    recurrence saves grows like T + S, never like the (T, B, S, n') activations themselves
    (kept, they set the peak memory of training on long sentences)."""
    from nmtkit.models.fast.recurrence import bahdanau_recurrence

    torch.manual_seed(0)
    B, T, S, d, na = 3, 40, 40, 8, 64
    leaf = lambda *shape: torch.randn(*shape, requires_grad=True)  # noqa: E731
    args = (leaf(B, T, 3 * d), leaf(B, d), leaf(B, S, na), leaf(B, S, 3 * d), torch.ones(B, S, dtype=torch.bool),
            leaf(na + 2 * d, d), leaf(na), leaf(d, d))
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        states, alphas = bahdanau_recurrence(*args)
    assert saved, "the recurrence saved nothing: the hooks did not see it"
    assert max(saved) < T * B * S * na / 8
    assert sum(saved) < T * B * S * na / 4
    (states.sum() + alphas.sum()).backward()
    assert all(a.grad is not None for a in args if a.requires_grad)


def test_eager_rnnsearch_recurrence_allocates_its_source_by_attention_activations_per_pass_not_per_step():
    """Every eager step computes its (B, S, n') tanh activations in one buffer: a new tensor of
    that size per step fragmented glibc's heap (the small per-step results kept for the backward
    settle in the freed hole, the next step's activations no longer fit, and the heap grows by
    about a hole per step: a 64 x 64 batch held 790 MB resident for 340 MB of live data)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from nmtkit.models.fast.recurrence import bahdanau_recurrence

    torch.manual_seed(0)
    B, T, S, d, na = 3, 40, 40, 8, 64
    leaf = lambda *shape: torch.randn(*shape, requires_grad=True)  # noqa: E731
    args = (leaf(B, T, 3 * d), leaf(B, d), leaf(B, S, na), leaf(B, S, 3 * d), torch.ones(B, S, dtype=torch.bool),
            leaf(na + 2 * d, d), leaf(na), leaf(d, d))

    class FreshLarge(TorchDispatchMode):
        """Counts op results of at least B*S*n' elements in storage no input of the op owns."""
        count = 0

        def __torch_dispatch__(self, func, types, a=(), kw=None):
            out = func(*a, **(kw or {}))
            ins = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves((a, kw))
                   if isinstance(t, torch.Tensor)}
            for t in torch.utils._pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.numel() >= B * S * na and t.untyped_storage().data_ptr() not in ins:
                    FreshLarge.count += 1
            return out

    with FreshLarge():
        states, alphas = bahdanau_recurrence(*args)
        (states.sum() + alphas.sum()).backward()
    assert args[2].grad is not None
    assert FreshLarge.count <= 6, f"{FreshLarge.count} fresh (B, S, n') tensors for T = {T} steps"


def test_rnnsearch_recurrence_under_autocast_matches_fp32():
    torch.manual_seed(0)
    model = build_model("rnnsearch", dict(TINY["rnnsearch"], init="default"))
    src, src_lens, tgt_in, _, _ = random_batch()
    with torch.no_grad():
        f32, a32 = model.decode_features(model.encode(src, src_lens), tgt_in)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            f16, a16 = model.decode_features(model.encode(src, src_lens), tgt_in)
    torch.testing.assert_close(a16.float(), a32, atol=0.02, rtol=0.0)
    torch.testing.assert_close(f16.float(), f32, atol=0.05, rtol=0.05)


@pytest.mark.parametrize("arch", IMPLEMENTED)
def test_the_ddp_loss_module_forward_is_the_models_loss(arch):
    """The DDP entry point: LossModule(model)(src, lens, tgt_in, tgt_out) is model.loss(...)."""
    from nmtkit.train.distributed import LossModule

    model = tiny_model(arch, exact=True)
    src, src_lens, tgt_in, tgt_out, _ = random_batch()
    a = LossModule(model, label_smoothing=0.1, chunk_tokens=5)(src, src_lens, tgt_in, tgt_out)
    b = model.loss(src, src_lens, tgt_in, tgt_out, label_smoothing=0.1)
    torch.testing.assert_close(a[0], b[0])
    assert a[2] == b[2]


@pytest.mark.parametrize("arch", IMPLEMENTED)
def test_dropout_is_active_in_training_only(arch):
    model = tiny_model(arch, dropout=0.5, exact=True)
    src, src_lens, tgt_in, _, _ = random_batch()
    with torch.no_grad():
        e1, e2 = model(src, src_lens, tgt_in), model(src, src_lens, tgt_in)
        model.train()
        t1, t2 = model(src, src_lens, tgt_in), model(src, src_lens, tgt_in)
    torch.testing.assert_close(e1, e2)
    assert not torch.allclose(t1, t2)


def test_lstm_attention_paper_init_option():
    torch.manual_seed(0)
    model = build_model("lstm-attention", dict(TINY["lstm-attention"], init="paper", dec_hidden=8))
    w = model.W_hh.weight
    for i in range(0, w.size(0), 8):
        torch.testing.assert_close(w[i : i + 8] @ w[i : i + 8].T, torch.eye(8), atol=1e-5, rtol=0)
    assert torch.all(model.W_y.bias == 0)


def test_rnnsearch_unpacked_cpu_encoder_equals_packed_gru():
    """The CPU encoder path (no packing, per-sentence reversal) equals a packed nn.GRU."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    model = tiny_model("rnnsearch", exact=True)
    src, src_lens, _, _, _ = random_batch()
    with torch.no_grad():
        enc = model.encode(src, src_lens)
        src_e = torch.nn.functional.pad(src, (0, 1))
        src_e[torch.arange(src.size(0)), src_lens] = 3
        packed = pack_padded_sequence(model.src_embed(src_e), src_lens + 1, batch_first=True, enforce_sorted=False)
        out, _ = model.encoder(packed)
        ann, _ = pad_packed_sequence(out, batch_first=True, total_length=src_e.size(1))
    torch.testing.assert_close(enc.annotations, ann, atol=1e-12, rtol=1e-12)


def test_rnnencdec_reports_all_zero_attention_of_source_width():
    model = tiny_model("rnnencdec", exact=True)
    src, src_lens, tgt_in, _, _ = random_batch()
    with torch.no_grad():
        enc = model.encode(src, src_lens)
        _, attn = model.decode_features(enc, tgt_in)
        _, _, step_attn = model.step(tgt_in[:, 0], model.init_state(enc), enc)
    assert attn.shape == (src.size(0), tgt_in.size(1), src.size(1) + 1)
    assert step_attn.shape == (src.size(0), src.size(1) + 1)
    assert torch.all(attn == 0) and torch.all(step_attn == 0)


@pytest.mark.parametrize("arch", IMPLEMENTED)
def test_fuse_steps_is_chosen_at_construction_and_with_fused_steps_copies_the_model(arch):
    model = tiny_model(arch, exact=True)
    assert model.fuse_steps is False
    assert build_model(arch, TINY[arch], fuse_steps=True).fuse_steps is True
    with pytest.raises(AttributeError):
        model.fuse_steps = True
    fused = model.with_fused_steps(True)
    assert fused.fuse_steps is True and model.fuse_steps is False
    assert fused.training == model.training
    for (name, p), (_, q) in zip(model.named_parameters(), fused.named_parameters(), strict=True):
        assert q.dtype == p.dtype and torch.equal(q, p) and q.data_ptr() != p.data_ptr(), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_blocked_inference_attention_scores_are_v_dot_tanh_of_query_plus_keys(dtype):
    """The CPU inference paths (row blocks; float32 through sigmoid, a faster kernel than tanh)
    give v^T tanh(q + k_j) to float32 rounding, and float64 through tanh itself (to float64 rounding:
    blocks sum in another order)."""
    from nmtkit.models.fast import recurrence as attention

    torch.manual_seed(0)
    B, G, S, K = 40, 5, 30, 64
    keys, q, v = torch.randn(B, S, K, dtype=dtype), torch.randn(B, G, K, dtype=dtype), torch.randn(K, dtype=dtype) / 8
    mask = torch.ones(B, S, dtype=torch.bool)
    ref = torch.tanh(keys.unsqueeze(1) + q.unsqueeze(2)).matmul(v)
    with torch.no_grad():
        grouped = attention.additive_scores_grouped(q, keys, v, mask)
        single = attention.additive_scores(q[:, 0], keys, v)
    assert attention._SCORE_BLOCK < B * G * S * K  # the blocked paths ran
    tol = dict(atol=1e-12, rtol=1e-12) if dtype == torch.float64 else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grouped, ref, **tol)
    torch.testing.assert_close(single, ref[:, 0], **tol)
