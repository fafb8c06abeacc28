"""The lax layer's composites over the primitives (convolution, windows and pooling, gathers,
reductions with a user computation, extras); ``ember.lax`` re-exports them with the primitives."""
