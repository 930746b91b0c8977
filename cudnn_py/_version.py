"""The package version: the one place it is written (pyproject.toml reads it from here; ``cudnn_py.__version__``,
``python -m cudnn_py --version`` and ``info`` print it)."""
__version__ = "0.1.0"
