"""Neural-network functions (activations, softmax, attention); the public names live in ``ember.nn``."""
