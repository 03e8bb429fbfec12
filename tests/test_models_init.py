"""Paper initialisation (Bahdanau et al. 2015, appendix B.1) of RNNsearch and RNNencdec."""
from __future__ import annotations

import pytest
import torch

from nmtkit.models import build_model

SIZES = dict(src_vocab_size=300, tgt_vocab_size=400, emb_dim=40, enc_hidden=48, dec_hidden=64, maxout=30)


def _orthogonal_blocks(w: torch.Tensor, block: int) -> bool:
    eye = torch.eye(block)
    return all(torch.allclose(w[i : i + block] @ w[i : i + block].T, eye, atol=1e-5)
               for i in range(0, w.size(0), block))


def _std_ok(w: torch.Tensor, std: float) -> bool:
    return abs(w.float().std().item() - std) < 0.1 * std and abs(w.float().mean().item()) < 0.1 * std


def recurrent_and_align(model):
    """(recurrent (weight, block) list, alignment weights, zero params) named as in the paper."""
    n, d = model.config.enc_hidden, model.config.dec_hidden
    rec = [(model.U_zr.weight, d), (model.U.weight, d), (model.encoder.weight_hh_l0, n)]
    if model.encoder.bidirectional:
        rec.append((model.encoder.weight_hh_l0_reverse, n))
    align = [model.W_a.weight, model.U_a.weight] if hasattr(model, "W_a") else []
    zeros = [model.v_a] if hasattr(model, "v_a") else []
    return rec, align, zeros


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec"])
def test_paper_init_statistics(arch):
    torch.manual_seed(0)
    cfg = dict(SIZES, att_hidden=56) if arch == "rnnsearch" else dict(SIZES)
    model = build_model(arch, cfg)
    rec, align, zeros = recurrent_and_align(model)
    seen = set()
    for w, block in rec:
        assert _orthogonal_blocks(w, block), "recurrent matrices must be orthogonal per gate"
        seen.add(id(w))
    for w in align:
        assert _std_ok(w, 0.001), w.std()
        seen.add(id(w))
    for p in zeros:
        assert torch.all(p == 0)
        seen.add(id(p))
    n_other = 0
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        if "bias" in name.rsplit(".", 1)[-1]:
            assert torch.all(p == 0), f"{name} must start at zero"
        else:
            assert _std_ok(p, 0.01), f"{name}: std {p.std():.4g}, expected 0.01"
            n_other += 1
    assert n_other >= 5


def test_zero_v_a_gives_uniform_attention_at_start():
    """A consequence of the paper init: e_ij = 0 for all j, so alpha is uniform over real positions."""
    torch.manual_seed(0)
    model = build_model("rnnsearch", dict(SIZES, att_hidden=56)).eval()
    src = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    lens = torch.tensor([4, 2])
    with torch.no_grad():
        _, attn = model.decode_features(model.encode(src, lens), torch.tensor([[2, 5, 6], [2, 7, 0]]))
    torch.testing.assert_close(attn[0], torch.full((3, 5), 1 / 5))
    torch.testing.assert_close(attn[1, :, :3], torch.full((3, 3), 1 / 3))


def test_default_init_differs_from_paper_init():
    torch.manual_seed(0)
    model = build_model("rnnsearch", dict(SIZES, att_hidden=56, init="default"))
    assert not torch.all(model.v_a == 0)
    assert model.W_o.weight.std() > 0.02


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec", "lstm-attention"])
def test_uniform_init_draws_every_parameter_within_a_tenth(arch):
    """init "uniform" is OpenNMT-py's param_init 0.1: every weight in U(-0.1, 0.1), padding rows zero."""
    torch.manual_seed(0)
    sizes = {k: v for k, v in SIZES.items() if arch != "lstm-attention" or k != "maxout"}
    model = build_model(arch, dict(sizes, init="uniform"))
    for name, p in model.named_parameters():
        assert p.abs().max() <= 0.1, name
        if p.numel() >= 1000:  # U(-a, a) has std a / sqrt(3)
            assert abs(p.std().item() - 0.1 / 3 ** 0.5) < 0.005, name
    for emb in (model.src_embed, model.tgt_embed):
        assert torch.all(emb.weight[0] == 0)


def test_uniform_emb_init_changes_only_the_embeddings():
    """init "uniform-emb": PyTorch's defaults everywhere (same draws), embeddings U(-0.1, 0.1)."""
    torch.manual_seed(0)
    default = build_model("rnnsearch", dict(SIZES, att_hidden=56, init="default"))
    torch.manual_seed(0)
    small = build_model("rnnsearch", dict(SIZES, att_hidden=56, init="uniform-emb"))
    assert default.src_embed.weight.std() > 0.9  # N(0, 1)
    for name, p in small.named_parameters():
        if "embed" in name:
            assert p.abs().max() <= 0.1 and torch.all(p[0] == 0), name
        else:
            torch.testing.assert_close(p, dict(default.named_parameters())[name], msg=name)


def test_dropout_sites_leave_the_other_places_deterministic():
    """With dropout only on the deep output, the encoder is deterministic in training mode."""
    from nmtkit.errors import ConfigError

    model = build_model("rnnsearch", dict(SIZES, att_hidden=56, dropout=0.5, dropout_sites="out")).train()
    src, lens = torch.tensor([[5, 6, 7, 8]]), torch.tensor([4])
    a, b = model.encode(src, lens).annotations, model.encode(src, lens).annotations
    torch.testing.assert_close(a, b)
    everywhere = build_model("rnnsearch", dict(SIZES, att_hidden=56, dropout=0.5)).train()
    assert not torch.equal(everywhere.encode(src, lens).annotations, everywhere.encode(src, lens).annotations)
    with pytest.raises(ConfigError, match="dropout_sites"):
        build_model("rnnsearch", dict(SIZES, att_hidden=56, dropout_sites="src,attention"))


@pytest.mark.parametrize("arch", ["rnnsearch", "rnnencdec", "lstm-attention"])
@pytest.mark.parametrize("init", ["paper", "default", "uniform"])
def test_a_loaded_model_draws_no_random_numbers_and_holds_exactly_its_checkpoints_tensors(tmp_path, arch, init):
    """load_model builds the model uninitialised (no random draws: the paper's orthogonal
    blocks cost a paper-size model a second) and the strict load fills every tensor it holds:
    no parameter, buffer or tensor attribute keeps the memory it was built with."""
    from nmtkit.checkpoint import load_model
    from tests.conftest import make_checkpoint, tiny_model

    saved = tiny_model(arch, seed=5, init=init)
    path = make_checkpoint(tmp_path / "m.pt", model=saved, arch=arch)
    before = torch.random.get_rng_state()
    model, _ = load_model(path)
    assert torch.equal(torch.random.get_rng_state(), before)
    state = model.state_dict()
    assert state.keys() == saved.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in saved.state_dict().items())
    held = {id(t) for t in list(model.parameters()) + list(model.buffers())}
    loose = [f"{name}.{attr}" for name, mod in model.named_modules() for attr, value in vars(mod).items()
             if isinstance(value, torch.Tensor) and id(value) not in held]
    assert not loose, loose
