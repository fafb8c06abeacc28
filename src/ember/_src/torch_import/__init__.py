"""The PyTorch importer: ``torch.export`` graphs as ember functions (see :mod:`.convert`)."""
