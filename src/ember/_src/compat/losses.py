"""optax's loss functions (``ember.optim.l2_loss``, ``softmax_cross_entropy``, ...).

Each returns the loss per example (no reduction), as optax does: elementwise for the regression
losses, with the class axis summed away for the classification ones. Written over
``ember.numpy``, so they trace, differentiate and ``vmap``.
"""

from __future__ import annotations

from typing import Any

import ember.numpy as jnp
from ember import lax, nn


def _errors(predictions: Any, targets: Any) -> Any:
    predictions = jnp.asarray(predictions)
    return predictions if targets is None else predictions - jnp.asarray(targets)


def squared_error(predictions: Any, targets: Any = None) -> Any:
    """``(predictions - targets) ** 2`` elementwise (``targets`` defaults to zeros)."""
    return jnp.square(_errors(predictions, targets))


def l2_loss(predictions: Any, targets: Any = None) -> Any:
    """Half the squared error, ``0.5 * (predictions - targets) ** 2``, as ``optax.l2_loss``."""
    return 0.5 * squared_error(predictions, targets)


def huber_loss(predictions: Any, targets: Any = None, delta: float = 1.0) -> Any:
    """Huber loss: ``0.5 * e ** 2`` where ``|e| <= delta``, ``delta * (|e| - 0.5 * delta)`` beyond."""
    abs_errors = jnp.abs(_errors(predictions, targets))
    quadratic = jnp.minimum(abs_errors, delta)
    return 0.5 * quadratic ** 2 + delta * (abs_errors - quadratic)


def log_cosh(predictions: Any, targets: Any = None) -> Any:
    """``log(cosh(predictions - targets))``, computed without overflow."""
    e = _errors(predictions, targets)
    return jnp.logaddexp(e, -e) - jnp.log(jnp.asarray(2.0, e.dtype))


def hinge_loss(predictor_outputs: Any, targets: Any) -> Any:
    """``max(0, 1 - predictor_outputs * targets)`` with targets in ``{-1, 1}``."""
    return jnp.maximum(0, 1 - jnp.asarray(predictor_outputs) * jnp.asarray(targets))


def sigmoid_binary_cross_entropy(logits: Any, labels: Any) -> Any:
    """Binary cross entropy of ``sigmoid(logits)`` against ``labels`` in ``[0, 1]``, elementwise."""
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels).astype(logits.dtype)
    return -labels * nn.log_sigmoid(logits) - (1.0 - labels) * nn.log_sigmoid(-logits)


def softmax_cross_entropy(logits: Any, labels: Any, axis: int = -1, where: Any = None) -> Any:
    """``-sum(labels * log_softmax(logits), axis)``: cross entropy against class probabilities."""
    log_p = nn.log_softmax(logits, axis=axis, where=where)
    prod = jnp.asarray(labels) * log_p
    if where is not None:
        prod = jnp.where(where, prod, 0)
    return -jnp.sum(prod, axis=axis)


def softmax_cross_entropy_with_integer_labels(logits: Any, labels: Any, axis: int = -1,
                                              where: Any = None) -> Any:
    """Cross entropy against integer class indices ``labels`` (one per example along ``axis``)."""
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels)
    axis = axis % logits.ndim
    log_p = nn.log_softmax(logits, axis=axis, where=where)
    picked = jnp.take_along_axis(log_p, jnp.expand_dims(labels, axis).astype(jnp.int32), axis=axis)
    return -jnp.squeeze(picked, axis)


def safe_softmax_cross_entropy(logits: Any, labels: Any) -> Any:
    """:func:`softmax_cross_entropy` where a ``-inf`` logit with zero probability adds 0, not NaN."""
    log_p = nn.log_softmax(logits, axis=-1)
    labels = jnp.asarray(labels)
    return -jnp.sum(jnp.where(labels == 0, 0, labels * log_p), axis=-1)


def kl_divergence(log_predictions: Any, targets: Any) -> Any:
    """``sum(targets * (log(targets) - log_predictions), -1)``, with ``0 * log 0 = 0``."""
    targets = jnp.asarray(targets)
    log_t = jnp.log(jnp.where(targets == 0, 1, targets))
    return jnp.sum(targets * (log_t - jnp.asarray(log_predictions)), axis=-1)


def cosine_similarity(predictions: Any, targets: Any, epsilon: float = 0.0) -> Any:
    """Cosine of the angle between ``predictions`` and ``targets`` along the last axis; each norm
    is at least ``epsilon``."""
    def unit(x: Any) -> Any:
        x = jnp.asarray(x)
        sq = jnp.sum(jnp.square(x), axis=-1, keepdims=True)
        return x * lax.rsqrt(jnp.maximum(sq, epsilon * epsilon))
    return jnp.sum(unit(predictions) * unit(targets), axis=-1)


def cosine_distance(predictions: Any, targets: Any, epsilon: float = 0.0) -> Any:
    """``1 - cosine_similarity(predictions, targets, epsilon)``."""
    return 1.0 - cosine_similarity(predictions, targets, epsilon)


def smooth_labels(labels: Any, alpha: float) -> Any:
    """One-hot ``labels`` mixed with the uniform distribution: ``(1 - alpha) * labels + alpha / K``."""
    labels = jnp.asarray(labels)
    return (1.0 - alpha) * labels + alpha / labels.shape[-1]


__all__ = ["cosine_distance", "cosine_similarity", "hinge_loss", "huber_loss", "kl_divergence", "l2_loss",
           "log_cosh", "safe_softmax_cross_entropy", "sigmoid_binary_cross_entropy", "smooth_labels",
           "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels", "squared_error"]
