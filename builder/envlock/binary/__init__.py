"""Readers of compiled code and the decisions over what they read.

ELF facts and the one section-table reader (``elf``), fatbin device code
(``fatbin``), the ld.so model (``loader``), the CUDA rules and verdicts
(``cuda``) and the driver's libraries (``driver``). Everything in this
package also runs inside the agent on the target's own Python (3.8 to
3.13), so it keeps to the 3.8 language, the stdlib and pyelftools; codecs
for fatbin images are the caller's (``envlock.fatbin_codecs``).
"""
