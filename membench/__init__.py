"""membench: memory and speed of deep-learning frameworks under memory-saving strategies."""

__version__ = "0.1.0"
