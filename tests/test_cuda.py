"""The CUDA half of the decision (binary/cuda.py): CUDA.md's rules as tables, on real nvcc builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_helpers import (
    GPUS,
    VARIANTS,
    cuda_libs,  # noqa: F401  (session fixture)
)
from envlock.binary import cuda
from envlock.binary.cuda import Gpu
from envlock.binary.fatbin import FatbinEntry
from envlock.inspect import inspect_path


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_verdict_table(name: str, cuda_libs: dict[str, Path]) -> None:  # noqa: F811
    """Each build on CC 9.0, 10.0, 12.0 and 12.1, as CUDA.md decides it."""
    got = tuple(inspect_path(cuda_libs[name], gpu).libraries[0].verdict for gpu in GPUS)
    assert got == VARIANTS[name].verdicts


def entry(kind: str, sm: int, suffix: str = "", isa: tuple[int, int] = (9, 0)) -> FatbinEntry:
    return FatbinEntry(0, 0, kind, sm, suffix, isa, 0x11, "none", 64, 100, 0, 0)


@pytest.mark.parametrize(
    ("sm", "suffix", "gpus"),
    [
        (120, "", {"12.0", "12.1"}),
        (120, "a", {"12.0"}),
        (120, "f", {"12.0", "12.1"}),
        (100, "", {"10.0", "10.3"}),
        (100, "a", {"10.0"}),
        (100, "f", {"10.0", "10.3"}),
        (90, "", {"9.0"}),
        (90, "a", {"9.0"}),
        (86, "", {"8.6", "8.9"}),
        (121, "", {"12.1"}),
    ],
)
def test_sass_rules(sm: int, suffix: str, gpus: set[str]) -> None:
    every = ("8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
    assert {g for g in every if cuda.sass_runs(entry("elf", sm, suffix), Gpu.parse(g))} == gpus


@pytest.mark.parametrize(
    ("sm", "suffix", "gpus"),
    [
        (90, "", {"9.0", "10.0", "10.3", "11.0", "12.0", "12.1"}),
        (120, "", {"12.0", "12.1"}),
        (120, "a", {"12.0"}),
        (100, "f", {"10.0", "10.3"}),
        (80, "", {"8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"}),
    ],
)
def test_ptx_rules(sm: int, suffix: str, gpus: set[str]) -> None:
    every = ("8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
    assert {g for g in every if cuda.ptx_runs(entry("ptx", sm, suffix), Gpu.parse(g))} == gpus


def test_driver_tables() -> None:
    assert cuda.ptx_driver((8, 7)) == "570.26"
    assert cuda.ptx_driver((8, 8)) == "575.51.03"
    assert cuda.ptx_driver((9, 0)) == "580.65.06"
    assert cuda.ptx_driver((8, 6)) == "570.26"  # between known ISAs: the next one's driver
    assert cuda.ptx_driver((9, 9)) is None
    assert cuda.gpu_driver(Gpu(12, 0)) == "570.26"
    assert cuda.RUNTIME_DRIVER[12] == "525.60.13" and cuda.RUNTIME_DRIVER[13] == "580"
    assert cuda.parse_driver("580.65.06") > cuda.parse_driver("580")
    assert Gpu.parse("sm_120") == Gpu.parse("12.0") == Gpu.parse("120") == Gpu(12, 0)
    for bad in ("13", "twelve", "12.10", ""):
        with pytest.raises(ValueError):
            Gpu.parse(bad)


@pytest.mark.parametrize(
    ("name", "gpu", "driver", "verdict", "reason"),
    [
        ("ptx90", "12.0", "580.65.06", "jit", "JIT from PTX compute_90"),
        ("ptx90", "12.0", "575.51.03", "no-image", "PTX ISA 9.0 needs driver >= 580.65.06"),
        ("ptx90", "9.0", "575.51.03", "native", "sm_90: 3/3 containers native"),
        ("sm120", "12.0", "565.57.01", "wont-load", "sm_120 GPUs need driver >= 570.26"),
        ("sm120", "12.0", "570.26", "native", "sm_120: 2/2 containers native"),
        ("sm120", "12.1", "570.26", "wont-load", "sm_121 GPUs need driver >= 575.51.03"),
    ],
)
def test_driver_decides(
    name: str,
    gpu: str,
    driver: str,
    verdict: str,
    reason: str,
    cuda_libs: dict[str, Path],  # noqa: F811
) -> None:
    library = inspect_path(cuda_libs[name], gpu, driver).libraries[0]
    assert library.verdict == verdict
    assert reason in library.reason
