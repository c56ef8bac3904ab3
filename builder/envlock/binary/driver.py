"""The libraries the NVIDIA driver installs on a host: one table for every part that asks.

No wheel ships them; they come with the kernel driver. So a venv never
provides them, and their absence on a host without a GPU means "no driver
here", not "broken venv". Asked by the ld.so model (``binary/loader.py``:
assumed present, with the symbols they export), by the import smoke (a
missing one is skipped on a host without a GPU) and by the lock's load
check (``loadable.py``: a library the host provides). Runs in the agent
too: Python 3.8, stdlib only.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple


class DriverLibrary(NamedTuple):
    """A family of driver libraries: every file name that starts with ``prefix``.

    ``symbols`` are the prefixes of the symbols the family exports; with no
    driver on the host they cannot be checked, so they count as bound.
    """

    prefix: str
    symbols: Tuple[str, ...]


# First match wins: the specific libnvidia-ml before the libnvidia- catch-all.
DRIVER_LIBRARIES: Tuple[DriverLibrary, ...] = (
    DriverLibrary("libcuda.so", ("cu",)),  # the CUDA driver API
    DriverLibrary("libnvidia-ml.so", ("nvml",)),  # NVML
    DriverLibrary("libnvcuvid.so", ("cuvid",)),  # NVDEC video decoding
    # encode, opticalflow, ptxjitcompiler, ...: their symbols are not modelled
    DriverLibrary("libnvidia-", ()),
)
DRIVER_LIBRARY_PREFIXES: Tuple[str, ...] = tuple(library.prefix for library in DRIVER_LIBRARIES)


def driver_library(name: str) -> Optional[DriverLibrary]:
    """The driver family a library file name (``libcuda.so.1``) belongs to; None for any other."""
    for library in DRIVER_LIBRARIES:
        if name.startswith(library.prefix):
            return library
    return None
