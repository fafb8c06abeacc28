"""nn.LSTM / nn.GRU / nn.RNN imported with a dynamic sequence axis (a scan), against PyTorch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")

import ember.torch as et  # noqa: E402

LENGTHS = (3, 8)  # two sequence lengths (and two batch sizes), one compile


# name: (layer, its kwargs, whether the initial states are inputs)
VARIANTS = {
    "lstm_batch_first": (torch.nn.LSTM, dict(batch_first=True), False),
    "lstm_2layers_bidir_state": (torch.nn.LSTM, dict(num_layers=2, bidirectional=True), True),
    "lstm_seq_first_no_bias": (torch.nn.LSTM, dict(bias=False), False),
    "gru_batch_first_2layers_state": (torch.nn.GRU, dict(batch_first=True, num_layers=2), True),
    "gru_bidir": (torch.nn.GRU, dict(bidirectional=True), False),
    "rnn_tanh_bidir_batch_first_state": (torch.nn.RNN, dict(bidirectional=True, batch_first=True), True),
    "rnn_relu_2layers": (torch.nn.RNN, dict(nonlinearity="relu", num_layers=2), False),
}
NAMES = sorted(VARIANTS)


class Zoo(torch.nn.Module):
    """Every variant applied to one batch-first input ``x`` (transposed for the sequence-first
    layers); ``s0..s3`` are the initial states of the variants that take them, in ``NAMES`` order.
    Returns each variant's output and final states, flat, in ``NAMES`` order (one import, one
    compile)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleDict({n: VARIANTS[n][0](3, 4, **VARIANTS[n][1]) for n in NAMES})

    def forward(self, x, s0, s1, s2, s3):
        given, outs = iter((s0, s1, s2, s3)), []
        for n in NAMES:
            rnn, with_state = self.layers[n], VARIANTS[n][2]
            xin = x if rnn.batch_first else x.transpose(0, 1)
            if not with_state:
                out, st = rnn(xin)
            elif isinstance(rnn, torch.nn.LSTM):
                out, st = rnn(xin, (next(given), next(given)))
            else:
                out, st = rnn(xin, next(given))
            outs += [out, *st] if isinstance(st, tuple) else [out, st]
        return tuple(outs)


def _states(zoo, b, g):
    """The initial states ``s0..s3`` for batch ``b``."""
    out = []
    for n in NAMES:
        rnn = zoo.layers[n]
        if VARIANTS[n][2]:
            k = rnn.num_layers * (2 if rnn.bidirectional else 1)
            count = 2 if isinstance(rnn, torch.nn.LSTM) else 1
            out += [torch.randn(k, b, 4, generator=g) for _ in range(count)]
    return out


def test_recurrent_layers_dynamic_sequence():
    """Each variant (LSTM, GRU, RNN tanh/relu; batch_first both ways, 2 layers, bidirectional, no
    bias, initial states or zeros) against PyTorch at two sequence lengths and batch sizes, one
    compile."""
    zoo = Zoo().eval()
    g = torch.Generator().manual_seed(1)
    x, states = torch.randn(2, 5, 3, generator=g), _states(zoo, 2, g)
    axes = {"x": ("b", "t", None), **{f"s{i}": (None, "b", None) for i in range(4)}}
    m = et.import_module(zoo, (x, *states), dynamic_axes=axes)
    assert [n.op for n in m.graph.nodes].count("ember.rnn.default") == len(NAMES)
    for b, t in zip((1, 3), LENGTHS):
        x, states = torch.randn(b, t, 3, generator=g), _states(zoo, b, g)
        with torch.no_grad():
            ref = zoo(x, *states)
        out = m(x.numpy(), *(s.numpy() for s in states))
        assert len(out) == len(ref)
        for i, (o, r) in enumerate(zip(out, ref)):
            np.testing.assert_allclose(np.asarray(o), r.numpy(), atol=1e-5, rtol=0, err_msg=f"output {i}")
    assert m._jitted.cache_info()["compiles"] == 1


class Classifier(torch.nn.Module):
    """Embedding -> 2-layer LSTM -> the last step's output -> logits (``out[:, -1]``)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 6)
        self.lstm = torch.nn.LSTM(6, 5, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(5, 3)

    def forward(self, ids):
        out, _ = self.lstm(self.emb(ids))
        return self.head(out[:, -1])


def test_lstm_classifier_last_step_and_session(tmp_path):
    """The classifier pattern with dynamic batch and sequence; the session saved to disk loads and
    gives the same logits."""
    torch.manual_seed(2)
    model = Classifier().eval()
    ids = torch.randint(0, 20, (1, 4))  # a batch-1 example: widened for the export
    m = et.import_module(model, (ids,), dynamic_axes={"ids": ("b", "t")})
    g = torch.Generator().manual_seed(3)
    for b, t in ((2, 1), (3, 11)):
        x = torch.randint(0, 20, (b, t), generator=g)
        with torch.no_grad():
            ref = model(x).numpy()
        np.testing.assert_allclose(np.asarray(m(x.numpy())), ref, atol=1e-5, rtol=0)
    assert m._jitted.cache_info()["compiles"] == 1
    import ember
    sess = ember.InferenceSession(m)
    sess.save(str(tmp_path / "s"))
    loaded = ember.InferenceSession.load(str(tmp_path / "s"))
    x = torch.randint(0, 20, (2, 6), generator=g)
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(np.asarray(loaded.run({"ids": x.numpy()})["output"]), ref, atol=1e-5, rtol=0)


def test_unbatched_input_and_module_restored():
    """An unbatched (2-D) input; the module's own forward is back after the import."""
    torch.manual_seed(4)
    gru = torch.nn.GRU(3, 4).eval()
    m = et.import_module(gru, (torch.randn(5, 3),), dynamic_axes={"input": ("t", None)})
    assert "forward" not in vars(gru)
    x = torch.randn(9, 3)
    with torch.no_grad():
        out, h = gru(x)
    got = m(x.numpy())
    np.testing.assert_allclose(np.asarray(got[0]), out.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(got[1]), h.numpy(), atol=1e-5, rtol=0)


def test_hand_written_loop_over_a_dynamic_axis_has_a_hint():
    """A Python loop over time unrolls: the specialization hint, not the data-dependent one."""
    class Loop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = torch.nn.GRUCell(3, 4)

        def forward(self, x):
            h = x.new_zeros(x.shape[0], 4)
            for t in range(x.shape[1]):
                h = self.cell(x[:, t], h)
            return h

    with pytest.raises(et.ExportError, match="hand-written loop over time") as e:
        et.import_module(Loop(), (torch.randn(2, 5, 3),), dynamic_axes={"x": ("b", "t", None)})
    assert "torch.cond" not in str(e.value)


def _mamba():
    T = pytest.importorskip("transformers", reason="the state space model tests use transformers")
    return T.MambaForCausalLM(T.MambaConfig(hidden_size=32, num_hidden_layers=2, vocab_size=100,
                                            state_size=8, expand=2, conv_kernel=4))


def _jamba():  # attention, mixture-of-experts and Mamba layers
    T = pytest.importorskip("transformers", reason="the state space model tests use transformers")
    return T.JambaForCausalLM(T.JambaConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                                            intermediate_size=64, vocab_size=100, num_key_value_heads=2,
                                            num_experts=2, num_experts_per_tok=1, mamba_d_state=8,
                                            mamba_expand=2, attn_layer_period=2, attn_layer_offset=1,
                                            expert_layer_period=2, expert_layer_offset=1))


def _rwkv():
    T = pytest.importorskip("transformers", reason="the state space model tests use transformers")
    return T.RwkvForCausalLM(T.RwkvConfig(hidden_size=32, num_hidden_layers=2, vocab_size=100,
                                          attention_hidden_size=32, intermediate_size=64, context_length=64))


@pytest.mark.parametrize("make,op,scans", [(_mamba, "ssm_scan", 2), (_jamba, "ssm_scan", 1),
                                           (_rwkv, "wkv_scan", 2)])
def test_state_space_models_dynamic_sequence(make, op, scans):
    """transformers' Mamba and Jamba without the mamba_ssm kernels, and RWKV on the CPU, loop over
    the sequence in Python, so torch's export fixed its length (a constraint error). Their
    recurrence is now one ``ember::ssm_scan`` / ``ember::wkv_scan`` node per layer, lowered to a
    scan over the sequence axis: logits at four batch and sequence sizes against PyTorch, one
    compile, and transformers' functions restored after the export."""
    import transformers.models.mamba.modeling_mamba as mm
    import transformers.models.rwkv.modeling_rwkv as mr
    torch.manual_seed(0)
    model = make().eval()
    before = mm.mamba_selective_scan, mr.rwkv_linear_attention
    kw = {"input_ids": torch.randint(1, 100, (2, 7)), "use_cache": False}
    m = et.import_module(model, (), kw, dynamic_axes={"input_ids": ("batch", "seq")})
    assert (mm.mamba_selective_scan, mr.rwkv_linear_attention) == before
    assert [n.op for n in m.graph.nodes].count(f"ember.{op}.default") == scans
    g = torch.Generator().manual_seed(1)
    for shape in ((2, 7), (1, 3), (3, 12), (1, 1)):
        ids = torch.randint(1, 100, shape, generator=g)
        with torch.inference_mode():
            want = model(input_ids=ids, use_cache=False).logits.numpy()
        got = m(ids.numpy())
        got = np.asarray(got[0] if isinstance(got, (tuple, list)) else got)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())
    assert m._jitted.cache_info()["compiles"] == 1


def test_ssm_scan_op_against_its_loop():
    """The ``ember::ssm_scan`` handler against the op's own torch loop, with decays above and below
    1 and a zero-length sequence."""
    from ember._src.torch_import.ops import OPS
    from ember._src.torch_import.ssm import ssm_scan
    g = torch.Generator().manual_seed(3)
    for L in (5, 1, 0):
        decay = torch.rand(2, 3, L, 4, generator=g) * 1.2
        inflow, readout = torch.randn(2, 3, L, 4, generator=g), torch.randn(2, L, 4, generator=g)
        want = [t.numpy() for t in ssm_scan(decay, inflow, readout)]
        got = OPS["ember.ssm_scan.default"].fn(None, decay.numpy(), inflow.numpy(), readout.numpy())
        assert got[0].shape == want[0].shape == (2, 3, L) and got[1].shape == want[1].shape == (2, 3, 4)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6)


def test_a_returned_cache_has_a_hint():
    """A causal LM imported with its default ``use_cache=True`` returns a cache object torch's
    export cannot flatten; the error says to import without it."""
    from ember._src.torch_import.export import ExportError
    with pytest.raises(ExportError, match="'use_cache': False"):
        et.import_module(_mamba().eval(), (), {"input_ids": torch.randint(1, 100, (2, 5))},
                         dynamic_axes={"input_ids": ("batch", "seq")})


def test_wkv_scan_against_transformers_loop():
    """``ember::wkv_scan`` (its torch loop and its ember handler) against transformers' own
    ``rwkv_linear_attention_cpu``, outputs and final state, with keys large enough that the
    unscaled exponentials would overflow float32."""
    mr = pytest.importorskip("transformers.models.rwkv.modeling_rwkv", reason="needs transformers")
    from ember._src.torch_import.ops import OPS
    from ember._src.torch_import.ssm import wkv_scan
    g = torch.Generator().manual_seed(4)
    for L in (6, 1):
        decay, first = torch.randn(5, generator=g), torch.randn(5, generator=g)
        key, value = torch.randn(2, L, 5, generator=g) * 40, torch.randn(2, L, 5, generator=g)
        out, state = mr.rwkv_linear_attention_cpu(decay, first, key, value, return_state=True)
        want = [out] + list(state)
        for got in (wkv_scan(decay, first, key, value),
                    OPS["ember.wkv_scan.default"].fn(None, *(t.numpy() for t in (decay, first, key, value)))):
            for a, b in zip(got, want):
                np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=2e-5, atol=1e-6)
