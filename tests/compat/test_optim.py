"""ember.optim against the published update rules (NumPy references here) and optax when installed."""

import math

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import optim

RNG = np.random.default_rng(0)
P0 = {"w": RNG.normal(size=(3, 2)).astype(np.float32), "b": RNG.normal(size=(2,)).astype(np.float32)}
GRADS = [{k: RNG.normal(size=v.shape).astype(np.float32) for k, v in P0.items()} for _ in range(4)]


def _run(tx, steps=4, jit=False):
    params = {k: jnp.asarray(v) for k, v in P0.items()}
    state = tx.init(params)

    def step(params, state, g):
        updates, state = tx.update(g, state, params)
        return optim.apply_updates(params, updates), state

    f = ember.jit(step) if jit else step
    for g in GRADS[:steps]:
        params, state = f(params, state, g)
    return {k: np.asarray(v, np.float64) for k, v in params.items()}


def _reference(rule, steps=4):
    """Apply ``rule(p, g, t, slot) -> p`` leaf-wise in float64; ``slot`` is a per-leaf dict."""
    out = {}
    for k in P0:
        p, slot = P0[k].astype(np.float64), {}
        for t, g in enumerate(GRADS[:steps], start=1):
            p = rule(p, g[k].astype(np.float64), t, slot)
        out[k] = p
    return out


def _close(a, b, rtol=2e-5, atol=2e-6):
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


def _adam_rule(lr, b1, b2, eps, wd=0.0):
    def rule(p, g, t, s):
        s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
        mh, vh = s["m"] / (1 - b1 ** t), s["v"] / (1 - b2 ** t)
        return p - lr * (mh / (np.sqrt(vh) + eps) + wd * p)
    return rule


def test_sgd_momentum_nesterov():
    _close(_run(optim.sgd(0.1)), _reference(lambda p, g, t, s: p - 0.1 * g))

    def heavy(p, g, t, s):
        s["v"] = g + 0.9 * s.get("v", 0)
        return p - 0.1 * s["v"]

    def nest(p, g, t, s):
        s["v"] = g + 0.9 * s.get("v", 0)
        return p - 0.1 * (g + 0.9 * s["v"])

    _close(_run(optim.sgd(0.1, momentum=0.9)), _reference(heavy))
    _close(_run(optim.momentum(0.1, 0.9)), _reference(heavy))
    _close(_run(optim.nesterov(0.1, 0.9)), _reference(nest))


def test_adam_and_adamw_jitted():
    _close(_run(optim.adam(1e-2), jit=True), _reference(_adam_rule(1e-2, 0.9, 0.999, 1e-8)))
    _close(_run(optim.adamw(1e-2, weight_decay=0.1)), _reference(_adam_rule(1e-2, 0.9, 0.999, 1e-8, wd=0.1)))


def test_rmsprop_adagrad_lion():
    def rms(p, g, t, s):
        s["nu"] = 0.9 * s.get("nu", 0) + 0.1 * g * g
        return p - 0.01 * g / np.sqrt(s["nu"] + 1e-8)

    def centered(p, g, t, s):
        s["mu"] = 0.9 * s.get("mu", 0) + 0.1 * g
        s["nu"] = 0.9 * s.get("nu", 0) + 0.1 * g * g
        return p - 0.01 * g / np.sqrt(s["nu"] - s["mu"] ** 2 + 1e-8)

    def adagrad(p, g, t, s):
        s["acc"] = s.get("acc", 0.1) + g * g
        return p - 0.05 * g / np.sqrt(s["acc"] + 1e-7)

    def lion(p, g, t, s):
        m = s.get("m", 0)
        u = np.sign(0.1 * g + 0.9 * m) + 1e-3 * p
        s["m"] = 0.99 * m + 0.01 * g
        return p - 0.01 * u

    _close(_run(optim.rmsprop(0.01)), _reference(rms), rtol=1e-4)
    _close(_run(optim.rmsprop(0.01, centered=True)), _reference(centered), rtol=1e-4)
    _close(_run(optim.adagrad(0.05)), _reference(adagrad))
    _close(_run(optim.lion(0.01)), _reference(lion))


def test_clip_by_global_norm_and_chain():
    g = {"a": jnp.asarray([3.0, 0.0]), "b": jnp.asarray([4.0])}  # global norm 5
    tx = optim.clip_by_global_norm(1.0)
    out, _ = tx.update(g, tx.init(g))
    np.testing.assert_allclose(out["a"], [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(out["b"], [0.8], rtol=1e-6)
    same, _ = optim.clip_by_global_norm(10.0).update(g, ())
    np.testing.assert_allclose(same["b"], [4.0])
    np.testing.assert_allclose(optim.global_norm(g), 5.0)
    tx = optim.chain(optim.clip_by_global_norm(1.0), optim.sgd(0.5))
    norms = [math.sqrt(sum(float(np.sum(G[k].astype(np.float64) ** 2)) for k in P0)) for G in GRADS]
    _close(_run(tx), _reference(lambda p, g, t, s: p - 0.5 * g / max(1.0, norms[t - 1])))


def test_weight_decay_mask():
    mask = {"w": True, "b": False}
    got = _run(optim.adamw(1e-2, weight_decay=0.5, mask=mask))
    want_w = _reference(_adam_rule(1e-2, 0.9, 0.999, 1e-8, wd=0.5))["w"]
    want_b = _reference(_adam_rule(1e-2, 0.9, 0.999, 1e-8, wd=0.0))["b"]
    _close(got, {"w": want_w, "b": want_b})
    got_fn = _run(optim.adamw(1e-2, weight_decay=0.5, mask=lambda p: {k: v.ndim > 1 for k, v in p.items()}))
    _close(got_fn, got, rtol=1e-6)


def test_schedules():
    s = optim.warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=10, decay_steps=110, end_value=0.1)
    for t in [0, 5, 10, 60, 110, 200]:
        if t < 10:
            want = t / 10
        else:
            c = min(t - 10, 100)
            want = 1.0 * ((1 - 0.1) * 0.5 * (1 + math.cos(math.pi * c / 100)) + 0.1)
        np.testing.assert_allclose(float(s(t)), want, rtol=1e-6, atol=1e-7)
    lin = optim.linear_schedule(1.0, 0.0, 4, transition_begin=2)
    np.testing.assert_allclose([float(lin(t)) for t in range(8)], [1, 1, 1, .75, .5, .25, 0, 0], atol=1e-7)
    ex = optim.exponential_decay(2.0, 3, 0.5, staircase=True)
    np.testing.assert_allclose([float(ex(t)) for t in (0, 2, 3, 7)], [2, 2, 1, 0.5])
    pc = optim.piecewise_constant_schedule(1.0, {2: 0.5, 4: 0.1})
    np.testing.assert_allclose([float(pc(t)) for t in range(6)], [1, 1, .5, .5, .05, .05], rtol=1e-6)
    # a schedule as learning rate: sgd with lr(t) at update t (count starts at 0)
    sched = optim.linear_schedule(0.1, 0.0, 4)
    _close(_run(optim.sgd(sched), jit=True), _reference(lambda p, g, t, s: p - 0.1 * (1 - (t - 1) / 4) * g))


@pytest.mark.parametrize("name,kw", [("adam", {}), ("adamw", {"weight_decay": 0.1}), ("rmsprop", {}),
                                     ("adagrad", {}), ("lion", {}), ("sgd", {"momentum": 0.9}),
                                     ("sgd", {"momentum": 0.9, "nesterov": True})])
def test_against_optax(name, kw):
    optax = pytest.importorskip("optax", reason="comparison with optax itself")
    tx_o = getattr(optax, name)(1e-2, **kw)
    params = {k: v.copy() for k, v in P0.items()}
    state = tx_o.init(params)
    for g in GRADS:
        u, state = tx_o.update(g, state, params)
        params = optax.apply_updates(params, u)
    _close(_run(getattr(optim, name)(1e-2, **kw)), {k: np.asarray(v, np.float64) for k, v in params.items()},
           rtol=1e-4, atol=1e-5)


def test_float64_parameters_keep_precision():
    params = {k: jnp.asarray(v.astype(np.float64)) for k, v in P0.items()}
    tx = optim.adam(1e-2)
    state = tx.init(params)
    for g in GRADS:
        g64 = {k: v.astype(np.float64) for k, v in g.items()}
        updates, state = tx.update(g64, state, params)
        params = optim.apply_updates(params, updates)
    assert params["w"].dtype == np.float64
    _close({k: np.asarray(v) for k, v in params.items()}, _reference(_adam_rule(1e-2, 0.9, 0.999, 1e-8)),
           rtol=1e-12, atol=1e-14)
