"""Implementation of ember.vsla (variable-shape linear algebra)."""
