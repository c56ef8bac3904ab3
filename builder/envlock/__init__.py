"""envlock: lock, rebuild and check GPU Python venvs byte for byte."""

__version__ = "0.1.0"
