"""Implementations of JAX-compatible libraries (``ember.tree_util``, ``ember.optim``, ...).

Each module is written over ember's public namespaces (``ember.numpy``, ``ember.lax``,
``ember.random``) and core modules, so everything traces, jits, differentiates and vmaps.
"""
