"""passes.inline_calls: checkpoint / custom_jvp_call / custom_vjp_call bodies are spliced into the
caller (fresh variables, captured constants carried over, nested calls too) and then fuse."""

from __future__ import annotations

import numpy as np

import ember
import ember.numpy as jnp
from ember._src.native.rewrite import passes
from ember._src.program import Program, run_numpy, validate
from tests.native.conftest import requires_cc
from tests.native.util import check

RNG = np.random.default_rng(5)
X = RNG.standard_normal(16)
C = RNG.standard_normal(16)


@ember.custom_jvp
def sin2(x):
    return jnp.sin(x) * 2.0


sin2.defjvp(lambda p, t: (sin2(p[0]), jnp.cos(p[0]) * 2.0 * t[0]))


@ember.custom_vjp
def softplus(x):
    return jnp.log1p(jnp.exp(x))


softplus.defvjp(lambda x: (softplus(x), x), lambda x, ct: (ct / (1.0 + jnp.exp(-x)),))


def f(x):
    y = ember.checkpoint(lambda z: jnp.tanh(z) * C + sin2(z))(x)  # C is a captured constant
    return softplus(y) + softplus(x * 2.0)  # the same sub-program called twice


def names(p: Program) -> list[str]:
    return [e.prim.name for e in p.eqns]


def values(p: Program, *args) -> list[np.ndarray]:
    return run_numpy(p, [np.asarray(getattr(c, "value", c)) for c in p.consts], list(args))


def test_inline_calls_splices_nested_sub_programs_with_constants():
    p = ember.make_program(f)(X)
    assert {"checkpoint", "custom_vjp_call"} <= set(names(p))
    q = passes.inline_calls(p)
    validate(q)
    assert not {"checkpoint", "custom_jvp_call", "custom_vjp_call"} & set(names(q))
    assert len(q.consts) == len(q.constvars) >= 1
    ids = [v.id for e in q.eqns for v in e.outvars]
    assert len(ids) == len(set(ids))  # SSA: the twice-called body got fresh variables
    for a, b in zip(values(p, X), values(q, X)):
        np.testing.assert_allclose(b, a, rtol=1e-14)
    np.testing.assert_allclose(values(q, X)[0], np.log1p(np.exp(np.tanh(X) * C + 2 * np.sin(X)))
                               + np.log1p(np.exp(2 * X)), rtol=1e-12)


def test_inline_calls_is_identity_without_calls():
    p = ember.make_program(lambda x: jnp.exp(x) + 1.0)(X)
    assert passes.inline_calls(p) is p


@requires_cc
def test_inlined_calls_fuse_into_one_kernel_forward_and_grad():
    exe = check(f, X)
    assert exe.schedule.count("fallback") == 0 and exe.schedule.count("call") == 0
    assert exe.schedule.count("kernel") == 1
    g = ember.grad(lambda x: f(x).sum())
    exe = check(g, X)
    assert exe.schedule.count("fallback") == 0
    eps = 1e-6
    fd = (np.asarray(f(X + eps)) - np.asarray(f(X - eps))) / (2 * eps)  # f is elementwise
    np.testing.assert_allclose(np.asarray(ember.jit(g, backend="native")(X)), fd, rtol=1e-6, atol=1e-8)
