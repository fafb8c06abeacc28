"""A stand-in for the ``datasets`` module of JAX's examples: ``mnist()`` returns synthetic data of
MNIST's layout (flattened 28x28 images in [0, 1], one-hot float32 labels) without downloading.
Each class is a fixed random prototype image; a sample is its prototype plus noise, so an MLP can
learn it but does not reach 100% in a few steps. The sizes are small so the examples run in
seconds (``EMBER_EXAMPLE_TRAIN``/``EMBER_EXAMPLE_TEST`` change them)."""

import os

import numpy as np


def _one_hot(x, k, dtype=np.float32):
    return np.array(x[:, None] == np.arange(k), dtype)


def mnist():
    """Synthetic ``(train_images, train_labels, test_images, test_labels)``."""
    rng = np.random.RandomState(1234)
    n_train = int(os.environ.get("EMBER_EXAMPLE_TRAIN", "512"))
    n_test = int(os.environ.get("EMBER_EXAMPLE_TEST", "256"))
    protos = rng.rand(10, 784).astype(np.float32)

    def draw(n):
        labels = rng.randint(0, 10, n)
        images = np.clip(0.5 * protos[labels] + 0.5 * rng.rand(n, 784), 0, 1).astype(np.float32)
        return images, _one_hot(labels, 10)

    train_images, train_labels = draw(n_train)
    test_images, test_labels = draw(n_test)
    return train_images, train_labels, test_images, test_labels
