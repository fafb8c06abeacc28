"""``ember.torch``: run PyTorch models as ember functions.

``import_module(model, args, dynamic_axes={"input_ids": ("batch", "seq")})`` exports the model
with ``torch.export``, decomposes it to core ATen and returns an :class:`ImportedModule` whose
``fn(params, *inputs)`` is a pure ember function (``jit``, ``grad``, ``vmap`` apply) and whose call
runs it under ``ember.jit`` with one compile for every size of the named axes. torch is needed
only to import; see ``docs/torch.md``.
"""

from ember._src.torch_import.convert import ImportedModule, UnsupportedOpError, import_module, supported_ops

__all__ = ["ImportedModule", "UnsupportedOpError", "import_module", "supported_ops"]
