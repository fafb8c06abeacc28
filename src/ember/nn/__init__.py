"""Neural-network functions: activations, softmax/logsumexp, one_hot, standardize, attention."""

from ember._src.nn.functions import (
    celu,
    dot_product_attention,
    elu,
    gelu,
    glu,
    hard_sigmoid,
    hard_silu,
    hard_swish,
    hard_tanh,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    logsumexp,
    mish,
    normalize,
    one_hot,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    soft_sign,
    softmax,
    softplus,
    sparse_plus,
    squareplus,
    standardize,
    swish,
)

__all__ = [
    "celu", "dot_product_attention", "elu", "gelu", "glu", "hard_sigmoid", "hard_silu", "hard_swish",
    "hard_tanh", "leaky_relu", "log_sigmoid", "log_softmax", "logsumexp", "one_hot", "relu", "relu6",
    "selu", "sigmoid", "silu", "soft_sign", "softmax", "softplus", "standardize", "swish",
    "mish", "normalize", "sparse_plus", "squareplus",
]

from ember.nn import initializers  # noqa: E402

__all__ += ["initializers"]
