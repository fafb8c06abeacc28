"""The code cells of JAX's tutorial ``docs/random-numbers.md`` (jax-ml/jax at cec06d116c05,
Apache License 2.0), unchanged and in order; ``(code, raises)``, where ``raises`` marks a cell
the tutorial shows raising an exception."""

# ruff: noqa: E501

CELLS = [
    ('import numpy as np\nnp.random.seed(0)',
     False),
    ('print(np.random.random())\nprint(np.random.random())\nprint(np.random.random())',
     False),
    ('def print_truncated_random_state():\n  """To avoid spamming the outputs, print only part of the state."""\n  full_random_state = np.random.get_state()\n  print(str(full_random_state)[:460], \'...\')\n\nprint_truncated_random_state()',
     False),
    ('np.random.seed(0)\nprint_truncated_random_state()',
     False),
    ('_ = np.random.uniform()\nprint_truncated_random_state()',
     False),
    ('np.random.seed(0)\nprint(np.random.uniform(size=3))',
     False),
    ('np.random.seed(0)\nprint("individually:", np.stack([np.random.uniform() for _ in range(3)]))\n\nnp.random.seed(0)\nprint("all at once: ", np.random.uniform(size=3))',
     False),
    ('import numpy as np\n\nnp.random.seed(0)\n\ndef bar(): return np.random.uniform()\ndef baz(): return np.random.uniform()\n\ndef foo(): return bar() + 2 * baz()\n\nprint(foo())',
     False),
    ('from jax import random\n\nkey = random.key(42)\nprint(key)',
     False),
    ('print(random.normal(key))\nprint(random.normal(key))',
     False),
    ('for i in range(3):\n  new_key, subkey = random.split(key)\n  del key  # The old key is consumed by split() -- we must never use it again.\n\n  val = random.normal(subkey)\n  del subkey  # The subkey is consumed by normal().\n\n  print(f"draw {i}: {val}")\n  key = new_key  # new_key is safe to use in the next iteration.',
     False),
    ('key, subkey = random.split(key)',
     False),
    ('key, *forty_two_subkeys = random.split(key, num=43)',
     False),
    ('key = random.key(42)\nsubkeys = random.split(key, 3)\nsequence = np.stack([random.normal(subkey) for subkey in subkeys])\nprint("individually:", sequence)\n\nkey = random.key(42)\nprint("all at once: ", random.normal(key, shape=(3,)))',
     False),
    ('import jax\nprint("vectorized:", jax.vmap(random.normal)(subkeys))',
     False),
]
