"""Run PyTorch models in ember: ``import_module`` converts a ``torch.export`` graph into an ember
function (see docs/torch.md). torch is needed to import, not to run a saved session."""

from ember._src.session import SessionError
from ember._src.torch_import.interpret import UnsupportedOpError
from ember._src.torch_import.module import ImportedModule, import_module
from ember._src.torch_import.ops import OPS as _OPS


def supported_ops() -> list[str]:
    """The ATen ops the importer has a handler for."""
    return sorted(op for op in _OPS if op.startswith("aten."))


def __getattr__(name: str):
    if name == "ExportError":
        from ember._src.torch_import.export import ExportError
        return ExportError
    raise AttributeError(name)


__all__ = ["ExportError", "ImportedModule", "SessionError", "UnsupportedOpError", "import_module",
           "supported_ops"]
