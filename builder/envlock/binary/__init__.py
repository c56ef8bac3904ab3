"""Readers for compiled code: ELF facts and (later) CUDA device code.

Everything in this package also runs inside the agent on the target's own
Python (3.8 to 3.13), so it keeps to the 3.8 language and stdlib.
"""
