"""optax's losses and wrappers in ``ember.optim`` against hand-derived values (optax's documented
formulas), eagerly and under ``jit``."""

import math

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import optim

RNG = np.random.default_rng(7)


def _log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def test_regression_losses_hand_values():
    p, t = np.array([0.5, -2.0, 3.0]), np.array([0.0, 0.0, 1.0])
    np.testing.assert_allclose(optim.l2_loss(p, t), [0.125, 2.0, 2.0])
    np.testing.assert_allclose(optim.squared_error(p, t), [0.25, 4.0, 4.0])
    np.testing.assert_allclose(optim.l2_loss(p), 0.5 * p ** 2)
    # huber, delta=1: |e| <= 1 -> e^2/2, else |e| - 1/2
    np.testing.assert_allclose(optim.huber_loss(p, t), [0.125, 1.5, 1.5])
    np.testing.assert_allclose(optim.huber_loss(p, t, delta=2.0), [0.125, 2.0, 2.0])
    np.testing.assert_allclose(optim.log_cosh(p, t), np.log(np.cosh(p - t)), rtol=1e-12)
    np.testing.assert_allclose(optim.log_cosh(np.array([1000.0])), [1000.0 - math.log(2.0)])
    np.testing.assert_allclose(optim.hinge_loss(np.array([0.3, 2.0, -1.0]), np.array([1, 1, 1])), [0.7, 0, 2])


def test_classification_losses_hand_values():
    logits = RNG.normal(size=(4, 5))
    labels = np.array([0, 3, 4, 1])
    onehot = np.eye(5)[labels]
    want = -_log_softmax(logits)[np.arange(4), labels]
    np.testing.assert_allclose(optim.softmax_cross_entropy(logits, onehot), want, rtol=1e-12)
    np.testing.assert_allclose(optim.softmax_cross_entropy_with_integer_labels(logits, labels), want,
                               rtol=1e-12)
    np.testing.assert_allclose(optim.safe_softmax_cross_entropy(logits, onehot), want, rtol=1e-12)
    np.testing.assert_allclose(
        optim.softmax_cross_entropy_with_integer_labels(logits.T, labels, axis=0), want, rtol=1e-12)
    jitted = ember.jit(optim.softmax_cross_entropy_with_integer_labels)
    np.testing.assert_allclose(jitted(logits, labels), want, rtol=1e-12)
    # d/dlogits of the mean cross entropy is (softmax - onehot) / n
    g = ember.grad(lambda z: jnp.mean(optim.softmax_cross_entropy(z, onehot)))(logits)
    np.testing.assert_allclose(g, (np.exp(_log_softmax(logits)) - onehot) / 4, rtol=1e-10, atol=1e-12)
    z, y = np.array([-30.0, 0.0, 2.0]), np.array([0.0, 1.0, 0.25])
    sig = 1 / (1 + np.exp(-z))
    np.testing.assert_allclose(optim.sigmoid_binary_cross_entropy(z, y),
                               -y * np.log(sig) - (1 - y) * np.log1p(-sig), rtol=1e-10)
    q = np.array([[0.25, 0.75, 0.0]])
    lp = np.log(np.array([[0.5, 0.25, 0.25]]))
    np.testing.assert_allclose(optim.kl_divergence(lp, q), [0.25 * np.log(0.5) + 0.75 * np.log(3.0)],
                               rtol=1e-12)
    np.testing.assert_allclose(optim.smooth_labels(np.eye(4)[[1]], 0.2), [[0.05, 0.85, 0.05, 0.05]])


def test_cosine_similarity():
    a, b = np.array([[3.0, 4.0], [1.0, 0.0]]), np.array([[4.0, 3.0], [-2.0, 0.0]])
    np.testing.assert_allclose(optim.cosine_similarity(a, b), [24 / 25, -1.0], rtol=1e-12)
    np.testing.assert_allclose(optim.cosine_distance(a, b), [1 / 25, 2.0], rtol=1e-12)
    np.testing.assert_allclose(optim.cosine_similarity(np.zeros(2), np.ones(2), epsilon=1e-3), 0.0)


def test_inject_hyperparams_schedule_and_edit():
    opt = optim.inject_hyperparams(optim.sgd)(learning_rate=lambda count: 0.5 / (count + 1), momentum=0.5)
    params = {"w": np.array([1.0, 2.0])}
    state = opt.init(params)
    assert set(state.hyperparams) == {"learning_rate", "momentum"}  # nesterov (a bool) stays static
    g = {"w": np.array([1.0, -1.0])}
    u1, state = opt.update(g, state, params)  # trace t1 = g, lr 0.5
    np.testing.assert_allclose(u1["w"], [-0.5, 0.5])
    u2, state = ember.jit(opt.update)(g, state, params)  # t2 = g + 0.5 g = 1.5 g, lr 0.25
    np.testing.assert_allclose(u2["w"], [-0.375, 0.375])
    assert int(state.count) == 2 and float(state.hyperparams["learning_rate"]) == 0.25
    # a plain number is stored and may be edited between steps
    opt = optim.inject_hyperparams(optim.adam)(learning_rate=0.1)
    state = opt.init(params)
    state.hyperparams["learning_rate"] = jnp.asarray(0.01)
    u, state = opt.update(g, state, params)  # Adam's first step is -lr * sign(g)
    np.testing.assert_allclose(u["w"], [-0.01, 0.01], rtol=1e-6)
    f32 = optim.inject_hyperparams(optim.adam, hyperparam_dtype=np.float32)(learning_rate=0.1)
    assert f32.init(params).hyperparams["b1"].dtype == np.float32


def test_flatten_matches_unflattened():
    params = {"a": RNG.normal(size=(2, 3)), "b": RNG.normal(size=(4,))}
    grads = [{"a": RNG.normal(size=(2, 3)), "b": RNG.normal(size=(4,))} for _ in range(3)]
    ref, flat = optim.adam(0.1), optim.flatten(optim.adam(0.1))
    s_ref, s_flat = ref.init(params), flat.init(params)
    assert s_flat[0].mu.shape == (10,)
    for g in grads:
        u_ref, s_ref = ref.update(g, s_ref, params)
        u_flat, s_flat = flat.update(g, s_flat, params)
        for k in params:
            np.testing.assert_allclose(u_flat[k], u_ref[k], rtol=1e-12)


def test_multi_transform_labels():
    params = {"w": np.array([1.0, 2.0]), "b": np.array([3.0]), "frozen": np.array([5.0])}
    labels = {"w": "decay", "b": "plain", "frozen": "none"}
    opt = optim.multi_transform({"decay": optim.chain(optim.add_decayed_weights(0.5), optim.scale(-1.0)),
                                 "plain": optim.scale(-2.0), "none": optim.set_to_zero()}, labels)
    state = opt.init(params)
    assert set(state.inner_states) == {"decay", "plain", "none"}
    g = {"w": np.array([1.0, 1.0]), "b": np.array([1.0]), "frozen": np.array([1.0])}
    u, state = ember.jit(opt.update)(g, state, params)
    np.testing.assert_allclose(u["w"], [-1.5, -2.0])
    np.testing.assert_allclose(u["b"], [-2.0])
    np.testing.assert_allclose(u["frozen"], [0.0])
    by_fn = optim.multi_transform({"a": optim.scale(3.0), "b": optim.identity()},
                                  lambda p: {k: "a" if k == "w" else "b" for k in p})
    u, _ = by_fn.update(g, by_fn.init(params), params)
    np.testing.assert_allclose(u["w"], [3.0, 3.0])
    np.testing.assert_allclose(u["b"], [1.0])
    with pytest.raises(ValueError, match="no transformation"):
        optim.multi_transform({"a": optim.identity()}, labels).init(params)


def test_masked_applies_inner_only_where_true():
    opt = optim.masked(optim.scale(10.0), {"a": True, "b": False})
    u, _ = opt.update({"a": np.ones(2), "b": np.ones(2)}, opt.init({"a": np.ones(2), "b": np.ones(2)}))
    np.testing.assert_allclose(u["a"], [10, 10])
    np.testing.assert_allclose(u["b"], [1, 1])


def test_apply_if_finite_skips_and_counts():
    opt = optim.apply_if_finite(optim.sgd(1.0, momentum=0.5), max_consecutive_errors=1)
    params = {"w": np.zeros(2)}
    state = opt.init(params)
    good, bad = {"w": np.array([1.0, 2.0])}, {"w": np.array([np.nan, 1.0])}
    step = ember.jit(opt.update)
    u, state = step(good, state, params)
    np.testing.assert_allclose(u["w"], [-1.0, -2.0])
    u, state = step(bad, state, params)  # skipped: zeros, momentum kept
    np.testing.assert_allclose(u["w"], [0.0, 0.0])
    assert int(state.notfinite_count) == 1 and not bool(state.last_finite) and int(state.total_notfinite) == 1
    np.testing.assert_allclose(state.inner_state[0].trace["w"], [1.0, 2.0])
    u, state = step(good, state, params)  # trace = g + 0.5 * trace
    np.testing.assert_allclose(u["w"], [-1.5, -3.0])
    assert int(state.notfinite_count) == 0 and bool(state.last_finite) and int(state.total_notfinite) == 1
    _, state = step(bad, state, params)
    u, state = step(bad, state, params)  # the second in a row exceeds max_consecutive_errors: applied
    assert np.isnan(np.asarray(u["w"])[0]) and int(state.notfinite_count) == 2
    assert int(state.total_notfinite) == 3
