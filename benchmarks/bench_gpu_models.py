"""The model rows of ``bench_gpu.py``: an MLP training step (ember and JAX jit, torch eager and
``torch.compile``) and GPT-2 inference (ember's torch importer on the device vs torch eager and
``torch.compile``). Each builder checks its implementation's result before it is timed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ember
import ember.numpy as enp

LR = 1e-3


def torch_columns(c: Any, make: Callable[[bool], Callable]) -> dict[str, Callable]:
    """The torch columns: eager, and ``torch.compile`` unless ``--no-compile``; ``make(compiled)``
    returns the column's builder."""
    return {"torch eager": make(False), **({"torch.compile": make(True)} if c.compile else {})}


def _mlp_loss(xp: Any, relu: Callable) -> Callable:
    def loss(params: list, x: Any, y: Any) -> Any:
        h = x
        for i, w in enumerate(params):
            h = h @ w
            if i < len(params) - 1:
                h = relu(h)
        return xp.mean((h - y) ** 2)
    return loss


def _sgd(value_and_grad: Callable, loss: Callable) -> Callable:
    def step(params: list, x: Any, y: Any) -> tuple:
        val, g = value_and_grad(loss)(params, x, y)
        return [p - LR * gp for p, gp in zip(params, g)], val
    return step


def _numpy_loss(params: list, x: np.ndarray, y: np.ndarray) -> float:
    h = x.astype(np.float64)
    for i, w in enumerate(params):
        h = h @ w
        if i < len(params) - 1:
            h = np.maximum(h, 0)
    return float(np.mean((h - y) ** 2))


def mlp_row(c: Any, row: type, check: Callable) -> Any:
    """One SGD step of a 3-layer ReLU MLP (4096 wide, batch 256; 64 wide, batch 8 with ``--quick``);
    the parameters each step returns feed the next call, as in a training loop. The first step's
    loss is checked against NumPy's (float64)."""
    width, batch = (64, 8) if c.quick else (4096, 256)
    params = [(c.rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32) for _ in range(3)]
    x = c.rng.standard_normal((batch, width)).astype(np.float32)
    y = c.rng.standard_normal((batch, width)).astype(np.float32)
    want = np.float32(_numpy_loss(params, x, y))
    tol = (1e-4, 1e-5)
    impls: dict[str, Callable] = {}

    def ember_make(b: str) -> Callable[[], Callable[[], Any]]:
        def make() -> Callable[[], Any]:
            step = ember.jit(_sgd(ember.value_and_grad, _mlp_loss(enp, ember.nn.relu)), backend=b)
            state = {"p": ember.device_put(params, f"{b}:0")}
            xd, yd = ember.device_put((x, y), f"{b}:0")
            _, val = step(state["p"], xd, yd)
            check(val, want, *tol, f"ember {b} loss")

            def call() -> Any:
                state["p"], v = step(state["p"], xd, yd)
                return ember.block_until_ready(v)
            return call
        return make

    for b in c.ember_backends():
        impls[f"ember {b}"] = ember_make(b)
    if c.jax is not None:
        def jax_make() -> Callable[[], Any]:
            import jax
            import jax.numpy as jnp

            step = jax.jit(_sgd(jax.value_and_grad, _mlp_loss(jnp, jax.nn.relu)))
            state = {"p": [jax.device_put(p, c.jax) for p in params]}
            xd, yd = jax.device_put(x, c.jax), jax.device_put(y, c.jax)
            check(step(state["p"], xd, yd)[1], want, *tol, "jax loss")

            def call() -> Any:
                state["p"], v = step(state["p"], xd, yd)
                return v.block_until_ready()
            return call
        impls["jax"] = jax_make
    if c.torch is not None:
        torch = c.torch

        def torch_make(compiled: bool) -> Callable[[], Callable[[], Any]]:
            def make() -> Callable[[], Any]:
                loss = _mlp_loss(torch, torch.relu)
                loss = torch.compile(loss) if compiled else loss
                # copies (updated in place; a CPU tensor from_numpy would share the NumPy array)
                ps = [torch.tensor(p, device=c.tdev, requires_grad=True) for p in params]
                xd, yd = torch.from_numpy(x).to(c.tdev), torch.from_numpy(y).to(c.tdev)

                def call() -> Any:
                    val = loss(ps, xd, yd)
                    grads = torch.autograd.grad(val, ps)
                    with torch.no_grad():
                        for p, g in zip(ps, grads):
                            p.sub_(LR * g)
                    c.sync()
                    return val
                check(call().detach().cpu().numpy(), want, *tol, "torch loss")
                return call
            return make
        impls.update(torch_columns(c, torch_make))
    return row("mlp", f"MLP training step (3 x {width} wide, batch {batch}, SGD)", impls, big=True)


def gpt2_row(c: Any, row: type, check: Callable) -> Any:
    """GPT-2 inference on one sequence (12 layers, 768 wide, 12 heads, 1024 tokens, vocabulary
    50257; 2 layers, 32 wide, 16 tokens with ``--quick``), random weights from ``transformers``'
    config (nothing downloaded); the logits of the last position, checked against torch's."""
    import torch
    import transformers

    import ember.torch as et

    quick = c.quick
    layers, dim, heads, seq, vocab = (2, 32, 4, 16, 50) if quick else (12, 768, 12, 1024, 50257)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=dim, n_head=heads, vocab_size=vocab,
                                  n_positions=max(seq, 32), bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()

    class LastLogits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: Any) -> Any:
            return self.m(input_ids=input_ids, use_cache=False).logits[:, -1]

    w = LastLogits().eval()
    ids = torch.randint(0, vocab, (1, seq))
    dev = c.tdev if c.torch is not None else "cpu"
    with torch.no_grad():
        want = w.to(dev)(ids.to(dev)).float().cpu().numpy()
    tol = (1e-3, 1e-3)
    impls: dict[str, Callable] = {}

    def ember_make(b: str) -> Callable[[], Callable[[], Any]]:
        def make() -> Callable[[], Any]:
            imported = et.import_module(w.cpu(), kwargs={"input_ids": ids})
            s = ember.InferenceSession(imported, device=b)
            feed = {"input_ids": ids.numpy().astype(np.int32)}
            check(next(iter(s.run(feed).values())), want, *tol, f"ember {b}")
            return lambda: s.run(feed)
        return make

    for b in c.ember_backends():
        impls[f"ember {b}"] = ember_make(b)
    if c.torch is not None:
        def torch_make(compiled: bool) -> Callable[[], Callable[[], Any]]:
            def make() -> Callable[[], Any]:
                if compiled and c.left() < c.compile_seconds:
                    raise TimeoutError(f"{c.left():.0f} s of the budget left, --compile-seconds "
                                       f"{c.compile_seconds:g} needed for torch.compile")
                m = w.to(c.tdev)
                g = torch.compile(m) if compiled else m
                x = ids.to(c.tdev)

                def call() -> Any:
                    with torch.no_grad():
                        out = g(x)
                    c.sync()
                    return out
                t0 = time.perf_counter()
                check(call().float().cpu().numpy(), want, *tol, "torch")
                if compiled:
                    print(f"torch.compile of GPT-2: {time.perf_counter() - t0:.1f} s", flush=True)
                return call
            return make
        impls.update(torch_columns(c, torch_make))
    return row("gpt2", f"GPT-2 {layers} layers seq {seq} inference", impls, big=True)
