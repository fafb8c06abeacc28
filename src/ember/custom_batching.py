"""``ember.custom_batching``: ``custom_vmap`` (a function with its own batching rule), as JAX's."""

from ember._src.compat.api import custom_vmap

__all__ = ["custom_vmap"]
