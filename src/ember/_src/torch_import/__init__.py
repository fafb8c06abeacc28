"""Import PyTorch models (``torch.export`` graphs) as ember functions; see docs/torch.md."""
