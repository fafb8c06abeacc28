"""``jax.example_libraries.stax``: neural-network layers as ``(init_fun, apply_fun)`` pairs.

``init_fun(rng, input_shape) -> (output_shape, params)``; ``apply_fun(params, inputs, **kwargs)``.
Output shapes of convolutions and pools come from ``ember.eval_shape`` of the layer itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ember.numpy as jnp
from ember import lax, nn, random
from ember._src.compat.initializers import glorot_normal, normal, ones, zeros
from ember._src.eval_shape import ShapeDtypeStruct, eval_shape
from ember.nn import (
    elu,
    gelu,
    leaky_relu,
    log_softmax,
    relu,
    selu,
    sigmoid,
    softmax,
    softplus,
    standardize,
)

glorot, randn, logsoftmax = glorot_normal, normal, log_softmax  # JAX's backward-compatible aliases
Layer = tuple[Callable[..., Any], Callable[..., Any]]
_GLOROT_NORMAL, _NORMAL, _NORMAL_1E6 = glorot_normal(), normal(), normal(1e-6)  # JAX's defaults


def _shape_of(fn: Callable[..., Any], shape: Sequence[int], *shapes: Sequence[int]) -> tuple[int, ...]:
    """The output shape of ``fn`` on inputs of these shapes; a ``-1`` (an unknown batch size, as
    ``init_fun(rng, (-1, 28, 28, 1))``) in the first shape stays ``-1`` in the dims it determines."""
    def run(first: tuple[int, ...]) -> tuple[int, ...]:
        out = eval_shape(fn, *[ShapeDtypeStruct(tuple(s), np.float32) for s in (first, *shapes)])
        return tuple(out.shape)
    if all(int(d) >= 0 for d in shape):
        return run(tuple(shape))
    one, two = (run(tuple(1 if int(d) < 0 else d for d in shape)),
                run(tuple(2 if int(d) < 0 else d for d in shape)))
    return tuple(a if a == b else -1 for a, b in zip(one, two))


def Dense(out_dim: int, W_init: Callable = _GLOROT_NORMAL,  # noqa: N802, N803
          b_init: Callable = _NORMAL) -> Layer:
    """A fully-connected layer ``inputs @ W + b``."""
    def init_fun(rng: Any, input_shape: Sequence[int]) -> tuple:
        k1, k2 = random.split(rng)
        W, b = W_init(k1, (input_shape[-1], out_dim)), b_init(k2, (out_dim,))  # noqa: N806
        return tuple(input_shape[:-1]) + (out_dim,), (W, b)

    def apply_fun(params: Any, inputs: Any, **kwargs: Any) -> Any:
        W, b = params  # noqa: N806
        return jnp.dot(inputs, W) + b
    return init_fun, apply_fun


def GeneralConv(dimension_numbers: tuple[str, str, str], out_chan: int,  # noqa: N802
                filter_shape: Sequence[int], strides: Sequence[int] | None = None, padding: Any = "VALID",
                W_init: Callable | None = None, b_init: Callable = _NORMAL_1E6) -> Layer:  # noqa: N803
    """A convolution layer with dimension numbers such as ``("NHWC", "HWIO", "NHWC")``."""
    one = (1,) * len(filter_shape)
    strides = tuple(strides or one)
    return _conv_layer(lambda x, w: lax.conv_general_dilated(x, w, strides, padding, one, one,
                                                             dimension_numbers=dimension_numbers),
                       dimension_numbers, out_chan, filter_shape, W_init, b_init)


def GeneralConvTranspose(dimension_numbers: tuple[str, str, str], out_chan: int,  # noqa: N802
                         filter_shape: Sequence[int], strides: Sequence[int] | None = None,
                         padding: Any = "VALID", W_init: Callable | None = None,  # noqa: N803
                         b_init: Callable = _NORMAL_1E6) -> Layer:  # noqa: N803
    """A transposed-convolution layer (``lax.conv_transpose``)."""
    strides = tuple(strides or (1,) * len(filter_shape))
    return _conv_layer(lambda x, w: lax.conv_transpose(x, w, strides, padding,
                                                       dimension_numbers=dimension_numbers),
                       dimension_numbers, out_chan, filter_shape, W_init, b_init)


def _conv_layer(conv: Callable[[Any, Any], Any], dimension_numbers: tuple[str, str, str], out_chan: int,
                filter_shape: Sequence[int], W_init: Callable | None, b_init: Callable) -> Layer:  # noqa: N803
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    W_init = W_init or glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))  # noqa: N806

    def init_fun(rng: Any, input_shape: Sequence[int]) -> tuple:
        it = iter(filter_shape)
        in_chan = input_shape[lhs_spec.index("C")]
        kernel_shape = tuple(out_chan if c == "O" else in_chan if c == "I" else next(it) for c in rhs_spec)
        bias_shape = tuple(out_chan if c == "C" else 1 for c in out_spec)
        k1, k2 = random.split(rng)
        return _shape_of(conv, input_shape, kernel_shape), (W_init(k1, kernel_shape), b_init(k2, bias_shape))

    def apply_fun(params: Any, inputs: Any, **kwargs: Any) -> Any:
        W, b = params  # noqa: N806
        return conv(inputs, W) + b
    return init_fun, apply_fun


Conv = functools.partial(GeneralConv, ("NHWC", "HWIO", "NHWC"))
ConvTranspose = functools.partial(GeneralConvTranspose, ("NHWC", "HWIO", "NHWC"))
Conv1DTranspose = functools.partial(GeneralConvTranspose, ("NHC", "HIO", "NHC"))


def elementwise(fun: Callable[..., Any], **fun_kwargs: Any) -> Layer:
    """A layer applying ``fun(inputs, **fun_kwargs)``; no parameters."""
    return (lambda rng, input_shape: (input_shape, ()),
            lambda params, inputs, **kwargs: fun(inputs, **fun_kwargs))


Tanh = elementwise(jnp.tanh)
Relu = elementwise(nn.relu)
Exp = elementwise(jnp.exp)
LogSoftmax = elementwise(nn.log_softmax, axis=-1)
Softmax = elementwise(nn.softmax, axis=-1)
Softplus = elementwise(nn.softplus)
Sigmoid = elementwise(nn.sigmoid)
Elu = elementwise(nn.elu)
LeakyRelu = elementwise(nn.leaky_relu)
Selu = elementwise(nn.selu)
Gelu = elementwise(nn.gelu)


def _pooling_layer(reducer: Callable, init_val: float, average: bool = False) -> Callable[..., Layer]:
    def PoolingLayer(window_shape: Sequence[int], strides: Sequence[int] | None = None,  # noqa: N802
                     padding: str = "VALID", spec: str | None = None) -> Layer:
        window_shape = tuple(window_shape)
        strides = tuple(strides or (1,) * len(window_shape))
        non_spatial = (0, len(window_shape) + 1) if spec is None else (spec.index("N"), spec.index("C"))
        for i in sorted(non_spatial):
            window_shape = window_shape[:i] + (1,) + window_shape[i:]
            strides = strides[:i] + (1,) + strides[i:]

        def pool(x: Any) -> Any:
            return lax.reduce_window(x, init_val, reducer, window_shape, strides, padding)

        def apply_fun(params: Any, inputs: Any, **kwargs: Any) -> Any:
            out = pool(inputs)
            if not average:
                return out
            if padding == "VALID":
                return out / float(np.prod(window_shape))
            return out / pool(jnp.ones(inputs.shape, inputs.dtype))  # window sizes where padded
        return (lambda rng, input_shape: (_shape_of(pool, input_shape), ())), apply_fun
    return PoolingLayer


MaxPool = _pooling_layer(lax.max, -jnp.inf)
SumPool = _pooling_layer(lax.add, 0.0)
AvgPool = _pooling_layer(lax.add, 0.0, average=True)


def _flatten_init(rng: Any, input_shape: Sequence[int]) -> tuple:
    return (input_shape[0], int(np.prod(input_shape[1:]))), ()


Flatten = (_flatten_init, lambda params, inputs, **kwargs: jnp.reshape(inputs, (inputs.shape[0], -1)))
Identity = (lambda rng, input_shape: (input_shape, ()), lambda params, inputs, **kwargs: inputs)
FanInSum = (lambda rng, input_shape: (input_shape[0], ()), lambda params, inputs, **kwargs: sum(inputs))


def FanOut(num: int) -> Layer:  # noqa: N802
    """A layer returning ``num`` copies of its input (a list)."""
    return (lambda rng, input_shape: ([input_shape] * num, ()),
            lambda params, inputs, **kwargs: [inputs] * num)


def FanInConcat(axis: int = -1) -> Layer:  # noqa: N802
    """A layer concatenating a list of inputs along ``axis``."""
    def init_fun(rng: Any, input_shape: Sequence[Sequence[int]]) -> tuple:
        ax = axis % len(input_shape[0])
        concat = sum(s[ax] for s in input_shape)
        return tuple(input_shape[0][:ax]) + (concat,) + tuple(input_shape[0][ax + 1:]), ()
    return init_fun, lambda params, inputs, **kwargs: jnp.concatenate(inputs, axis)


def Dropout(rate: float, mode: str = "train") -> Layer:  # noqa: N802
    """Dropout keeping each input with probability ``rate`` (JAX's convention), scaled by ``1/rate``."""
    def apply_fun(params: Any, inputs: Any, **kwargs: Any) -> Any:
        rng = kwargs.get("rng")
        if rng is None:
            raise ValueError("Dropout layer requires apply_fun to be called with a PRNG key argument: "
                             "apply_fun(params, inputs, rng=key)")
        if mode != "train":
            return inputs
        keep = random.bernoulli(rng, rate, inputs.shape)
        return jnp.where(keep, inputs / rate, 0)
    return (lambda rng, input_shape: (input_shape, ())), apply_fun


def BatchNorm(axis: int | Sequence[int] = (0, 1, 2), epsilon: float = 1e-5, center: bool = True,  # noqa: N802
              scale: bool = True, beta_init: Callable = zeros, gamma_init: Callable = ones) -> Layer:
    """Batch normalization over ``axis`` with learned ``beta``/``gamma`` (no running averages)."""
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)

    def init_fun(rng: Any, input_shape: Sequence[int]) -> tuple:
        shape = tuple(d for i, d in enumerate(input_shape) if i not in axes)
        k1, k2 = random.split(rng)
        beta = beta_init(k1, shape) if center else ()
        gamma = gamma_init(k2, shape) if scale else ()
        return input_shape, (beta, gamma)

    def apply_fun(params: Any, x: Any, **kwargs: Any) -> Any:
        beta, gamma = params
        ed = tuple(None if i in axes else slice(None) for i in range(jnp.ndim(x)))
        z = nn.standardize(x, axes, epsilon=epsilon)
        if scale:
            z = gamma[ed] * z
        return z + beta[ed] if center else z
    return init_fun, apply_fun


def serial(*layers: Layer) -> Layer:
    """Layers in sequence; ``apply_fun`` splits ``rng`` (if given) into one key per layer."""
    init_funs, apply_funs = zip(*layers) if layers else ((), ())

    def init_fun(rng: Any, input_shape: Any) -> tuple:
        params = []
        for f in init_funs:
            rng, layer_rng = random.split(rng)
            input_shape, p = f(layer_rng, input_shape)
            params.append(p)
        return input_shape, params

    def apply_fun(params: Any, inputs: Any, **kwargs: Any) -> Any:
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, len(layers)) if rng is not None else (None,) * len(layers)
        for f, p, r in zip(apply_funs, params, rngs):
            inputs = f(p, inputs, rng=r, **kwargs)
        return inputs
    return init_fun, apply_fun


def parallel(*layers: Layer) -> Layer:
    """Layers applied to the matching entries of a list of inputs."""
    init_funs, apply_funs = zip(*layers) if layers else ((), ())

    def init_fun(rng: Any, input_shape: Any) -> tuple:
        rngs = random.split(rng, len(init_funs))
        return tuple(zip(*[f(r, s) for f, r, s in zip(init_funs, rngs, input_shape)]))

    def apply_fun(params: Any, inputs: Any, **kwargs: Any) -> Any:
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, len(layers)) if rng is not None else (None,) * len(layers)
        return [f(p, x, rng=r, **kwargs) for f, p, x, r in zip(apply_funs, params, inputs, rngs)]
    return init_fun, apply_fun


def shape_dependent(make_layer: Callable[[Any], Layer]) -> Layer:
    """A layer built from the input shape by ``make_layer(input_shape)``."""
    return (lambda rng, input_shape: make_layer(input_shape)[0](rng, input_shape),
            lambda params, inputs, **kwargs: make_layer(inputs.shape)[1](params, inputs, **kwargs))


__all__ = [
    "Conv1DTranspose", "ConvTranspose", "GeneralConvTranspose",
    "AvgPool", "BatchNorm", "Conv", "Dense", "Dropout", "Elu", "Exp", "FanInConcat", "FanInSum", "FanOut",
    "Flatten", "Gelu", "GeneralConv", "Identity", "LeakyRelu", "LogSoftmax", "MaxPool", "Relu", "Selu",
    "Sigmoid", "Softmax", "Softplus", "SumPool", "Tanh", "elementwise", "parallel", "serial",
    "shape_dependent",
    "elu", "gelu", "glorot", "glorot_normal", "leaky_relu", "log_softmax", "logsoftmax", "normal", "ones",
    "randn", "relu", "selu", "sigmoid", "softmax", "softplus", "standardize", "zeros",
]
