"""Equalities on input sizes that torch's export assumed while tracing (its guards), checked before
an imported module or a session runs: torch's graph is only right where they hold."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")

import ember  # noqa: E402
import ember.torch as et  # noqa: E402
from ember._src.torch_import.graph import Graph, Input  # noqa: E402
from ember._src.torch_import.guards import assert_in_program, parse_guards  # noqa: E402
from ember.errors import BindingError, ShapeError  # noqa: E402


class EvenPad(torch.nn.Module):
    """TF-style "same" padding decided by a Python branch on ``h % 2`` (MobileNetV1's
    ``apply_tf_padding``): torch's export bakes in the branch of its example."""

    def forward(self, x):
        pad = 1 if x.shape[2] % 2 == 0 else 2
        return torch.nn.functional.pad(x, (0, 0, 0, pad)) * 2


def test_a_baked_in_branch_raises_where_its_guard_fails(tmp_path):
    m = EvenPad()
    im = et.import_module(m, (torch.randn(1, 2, 6, 3),), dynamic_axes={"x": ("b", None, "h", "w")})
    assert any(g["op"] == "eq" for g in im.graph.guards)
    for h in (4, 6, 10):
        x = torch.randn(2, 2, h, 5)
        np.testing.assert_allclose(np.asarray(im(x.numpy())), m(x).numpy(), rtol=1e-6)
    odd = np.zeros((1, 2, 7, 3), np.float32)  # torch eager pads 2 rows here, the graph 1
    assert m(torch.from_numpy(odd)).shape[2] == 9
    for _ in range(2):  # (a failing binding is not remembered as passed)
        with pytest.raises(ShapeError, match=r"h: 7.*a condition torch's export assumed: \(h % 2\) == 0\): "
                                             r"axis 1 is 1, not 0"):
            im(odd)
    s = ember.InferenceSession(im)
    s.save(str(tmp_path / "s"))
    loaded = ember.InferenceSession.load(str(tmp_path / "s"))
    for sess in (s, loaded):
        x = np.random.default_rng(0).standard_normal((1, 2, 8, 3)).astype(np.float32)
        np.testing.assert_allclose(next(iter(sess.run({"x": x}).values())), m(torch.from_numpy(x)).numpy(),
                                   rtol=1e-6)
        # (a loaded session's program rejecting the caller's sizes is not the file's fault)
        with pytest.raises(BindingError, match=r"torch's export assumed: \(h % 2\) == 0"):
            sess.run({"x": odd})


def test_the_parser_keeps_equalities_and_rejects_other_python():
    g = Graph([Input("x", "user", "x", ["b", 3, "h"], "float32")], [], [], [])
    texts = ["(L['x'].size()[2] % 2) == 0",  # kept
             "L['x'].size()[2] // 4 == 2 * (L['x'].size()[2] // 8) and L['x'].size()[0] >= 2",  # one kept
             "(L['x'].size()[2] // 4) != 1", "max(1, L['x'].size()[0]) > 1",  # torch's 0/1 guards: dropped
             "L['x'].size()[1] == 3",  # static: nothing to check
             "__import__('os').system('true') == 0", "L['y'].size()[0] == 2",  # not sizes ember names
             "L['x'].size()[2] == 4 or L['x'].size()[2] == 8", "L['x'].stride()[0] == 1"]
    guards, skipped = parse_guards(texts, g)
    assert skipped == 4
    assert [g["op"] for g in guards] == ["eq", "eq"]
    g.guards = guards

    def f(x):  # the guards as constraints of a program over the named axes b and h
        assert_in_program(g, {"b": x.shape[0], "h": x.shape[2]})
        return x * 2.0

    jf = ember.jit(f, dynamic_axes={"x": ("b", None, "h")})
    np.testing.assert_array_equal(np.asarray(jf(np.ones((2, 3, 16), np.float32))), 2 * np.ones((2, 3, 16)))
    for _ in range(2):  # a failing binding fails every time
        with pytest.raises(ShapeError, match=r"\(h % 2\) == 0\): axis 1 is 1, not 0"):
            jf(np.ones((2, 3, 7), np.float32))
    with pytest.raises(ShapeError, match=r"\(h // 4\) == \(2 \* \(h // 8\)\)\): axis 1 is 3, not 2"):
        jf(np.ones((2, 3, 12), np.float32))
    assert jf.cache_info()["traces"] == 1


def test_guards_and_range_ends_are_constraints_of_the_program():
    """``imported.jit()`` (and its ``lower`` form) runs the traced program without the module's
    Python check, so the guards and the upper ends of the axis ranges are constraints of the
    program itself: a binding that fails one raises ``ShapeError`` naming it, never a result of
    torch's baked-in branch."""
    m = EvenPad()
    im = et.import_module(m, (torch.randn(1, 2, 6, 3),), dynamic_axes={"x": ("b", None, "h", "w")})
    j = im.jit()
    x = torch.randn(2, 2, 8, 5)
    np.testing.assert_allclose(np.asarray(j(x.numpy())), m(x).numpy(), rtol=1e-6)
    with pytest.raises(ShapeError, match=r"h: 7.*a condition torch's export assumed: \(h % 2\) == 0"):
        j(np.zeros((1, 2, 7, 3), np.float32))

    class Tail(torch.nn.Module):  # x[:, -16:] of a shorter axis: torch's range for seq ends at 15
        def forward(self, x):
            return x[:, -16:] * 2.0

    t = et.import_module(Tail(), (torch.zeros(1, 5),), dynamic_axes={"x": (None, "seq")})
    assert t.graph.ranges["seq"][1] == 15
    j = t.jit()
    np.testing.assert_array_equal(np.asarray(j(np.ones((1, 15), np.float32))), 2 * np.ones((1, 15)))
    with pytest.raises(ShapeError, match="axis 'seq' past 15, the largest size torch's export traced"):
        j(np.ones((1, 17), np.float32))
