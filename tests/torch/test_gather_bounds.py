"""Imported gathers keep torch's semantics: an index out of range raises (issue 32), checked inside
the native call, while ``ember.numpy`` keeps JAX's clamp/fill semantics (GPT-2: test_models.py)."""

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402
import ember.torch as et  # noqa: E402


class Gathers(torch.nn.Module):
    """embedding, index_select, gather and tensor indexing of one table by one index input."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(6, 3)

    def forward(self, ids):
        t = self.emb.weight
        a = self.emb(ids)                                     # [b, n, 3]
        b = torch.index_select(t, 0, ids.reshape(-1))         # [b*n, 3]
        c = torch.gather(t, 0, ids.reshape(-1, 1).expand(-1, 3))
        d = t[ids]                                            # negatives wrap, as torch
        return a.sum() + b.sum() + c.sum() + d.sum()


@functools.cache
def _gathers_module(dynamic):
    torch.manual_seed(0)
    model = Gathers().eval()
    ids = torch.tensor([[0, 5, 2], [1, 1, 3]])
    axes = {"ids": ("batch", "n")} if dynamic else None
    return model, et.import_module(model, (ids,), dynamic_axes=axes)


@pytest.mark.parametrize("dynamic", [False, True])
def test_in_range_ids_match_torch(dynamic):
    model, m = _gathers_module(dynamic)
    ids = np.array([[0, 5, 2], [4, 1, 3]])
    with torch.inference_mode():
        ref = model(torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(np.asarray(m(ids)), ref, rtol=1e-5)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("bad", [6, -1, 100])
def test_an_id_out_of_range_raises_like_torch(dynamic, bad):
    model, m = _gathers_module(dynamic)
    ids = np.array([[0, 5, 2], [4, bad, 3]])
    with pytest.raises(IndexError):
        model(torch.from_numpy(ids))                          # the reference: torch raises too
    with pytest.raises(IndexError) as e:
        m(ids)
    msg = str(e.value)
    assert "aten.embedding" in msg and "input 'ids'" in msg and "'emb.weight'" in msg, msg
    assert f"index {bad} (at [1, 1] of the index)" in msg and "size 6" in msg, msg
    # the module still runs afterwards
    assert np.isfinite(np.asarray(m(np.array([[0, 1, 2], [3, 4, 5]])))).all()


def test_each_gather_op_checks_its_index():
    def run(fn, ids):
        class M(torch.nn.Module):
            def forward(self, x, i):
                return fn(x, i)
        x = torch.arange(12.0).reshape(4, 3)
        m = et.import_module(M(), (x, torch.tensor([0, 1])))
        return m, x

    text = "input 'i' indexes axis 0 of input 'x'"
    cases = [(lambda x, i: torch.index_select(x, 0, i), "aten.index_select", text),
             (lambda x, i: torch.gather(x, 0, i[:, None].expand(-1, 3)), "aten.gather", "of input 'x'"),
             (lambda x, i: x[i], "aten.index.Tensor", text)]
    for fn, op, text in cases:
        m, x = run(fn, None)
        np.testing.assert_array_equal(np.asarray(m(x.numpy(), np.array([3, 0]))),
                                      fn(x, torch.tensor([3, 0])).numpy())
        with pytest.raises(IndexError, match="index 4 .* size 4") as e:
            m(x.numpy(), np.array([1, 4]))
        assert op in str(e.value) and text in str(e.value), str(e.value)
    m, x = run(lambda x, i: x[i], None)                       # tensor indexing wraps negatives
    np.testing.assert_array_equal(np.asarray(m(x.numpy(), np.array([-1, -4]))), x[[-1, -4]].numpy())
    with pytest.raises(IndexError, match="index -5"):
        m(x.numpy(), np.array([-5, 0]))


def test_a_computed_index_is_checked_inside_the_program():
    """The index is computed in the program (``i + 2``): the check is a call step of the native
    program (no fallback step), and a bad value raises with its value and the bound."""
    class Shifted(torch.nn.Module):
        def forward(self, x, i):
            return torch.index_select(x, 1, i + 2)

    x = np.arange(10.0, dtype=np.float32).reshape(2, 5)
    for axes in ({"i": ("n",)}, None):
        m = et.import_module(Shifted(), (torch.from_numpy(x), torch.tensor([0, 1])), dynamic_axes=axes)
        np.testing.assert_array_equal(np.asarray(m(x, np.array([2, -2]))), x[:, [4, 0]])
        with pytest.raises(IndexError, match="index 5 .* size 5"):
            m(x, np.array([0, 3]))
    ex = m._jitted.lower(x, np.array([0, 3])).executable
    steps = str(ex.schedule)
    assert "call check_index" in steps and " 0 fallback" in steps, steps


def test_ember_numpy_keeps_jax_semantics():
    """``ember.numpy`` still fills (NaN) or clamps out-of-range gathers, as JAX does."""
    x = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    f = ember.jit(lambda a, i: jnp.take(a, i, axis=0))
    out = np.asarray(f(x, np.array([0, 3, -1])))
    assert np.isnan(out[1]).all()
    np.testing.assert_array_equal(out[[0, 2]], x[[0, 2]])
    clip = ember.jit(lambda a, i: jnp.take(a, i, axis=0, mode="clip"))
    np.testing.assert_array_equal(np.asarray(clip(x, np.array([7, -3]))), x[[2, 0]])


def test_the_bound_is_a_dynamic_axis():
    """The gathered axis is a named dynamic axis: the bound is that axis's size in each call."""
    class Pick(torch.nn.Module):
        def forward(self, x, i):
            return torch.index_select(x, 1, i) * 2

    m = et.import_module(Pick(), (torch.randn(2, 6), torch.tensor([0, 5, 2])),
                         dynamic_axes={"x": (None, "seq")})
    for n in (6, 9):
        x = np.random.default_rng(n).random((2, n), dtype=np.float32)
        np.testing.assert_array_equal(np.asarray(m(x, np.array([0, n - 1, 2]))), x[:, [0, n - 1, 2]] * 2)
    with pytest.raises(IndexError, match=r"index 4 \(at \[1\] of the index\) is out of range for size 4"):
        m(np.zeros((2, 4), np.float32), np.array([0, 4, 1]))
