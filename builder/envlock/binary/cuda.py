"""Will a library's device code run on a GPU of compute capability X.Y with driver D?

The CUDA half of the decision (docs/cuda.md): the driver tables (the
driver each CUDA release, GPU and PTX ISA needs), the SASS and PTX rules,
the verdict per fatbin container and the library's worst (``judge_images``).
Whether the library loads at all is ``envlock.binary.loader``'s question.

Verdicts, least to most severe: native, jit, unknown, no-image, wont-load;
anything not understood is "unknown", never "native". Everything here is
pure decision over facts read elsewhere, so the same code can run on the
target host in the agent.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from envlock.binary.fatbin import KIND_ELF, KIND_PTX, FatbinContainer, FatbinEntry

# Library verdicts, least to most severe.
NATIVE, JIT, UNKNOWN, NO_IMAGE, WONT_LOAD = "native", "jit", "unknown", "no-image", "wont-load"
VERDICTS = (NATIVE, JIT, UNKNOWN, NO_IMAGE, WONT_LOAD)
# Container verdicts that do not count towards the library's verdict.
NO_KERNELS, RELOCATABLE, OTHER_GPU = "no-kernels", "relocatable", "other-gpu"
LOAD_OK = "ok"

DriverVersion = Tuple[int, ...]

# Minimum driver per CUDA release (NVIDIA's CUDA toolkit release notes, table 3).
CUDA_DRIVER = {
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}
# Minimum driver for a CUDA runtime of each major version (minor version compatibility).
RUNTIME_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580"}
# The CUDA release that introduced each PTX ISA version; a driver JITs PTX up to its own CUDA.
PTX_ISA_CUDA = {
    (8, 0): (12, 0),
    (8, 1): (12, 1),
    (8, 2): (12, 2),
    (8, 3): (12, 3),
    (8, 4): (12, 4),
    (8, 5): (12, 5),
    (8, 7): (12, 8),
    (8, 8): (12, 9),
    (9, 0): (13, 0),
}
# The CUDA release that first supports each GPU: its driver is the GPU's minimum.
GPU_CUDA = {89: (11, 8), 90: (11, 8), 100: (12, 8), 120: (12, 8), 103: (12, 9), 121: (12, 9), 110: (13, 0)}


def parse_driver(text: str) -> DriverVersion:
    """``"580.65.06"`` -> ``(580, 65, 6)``; raises ValueError."""
    if not re.match(r"^\d+(\.\d+)*$", text):
        raise ValueError(f"driver version {text!r} is not like 580.65.06")
    return tuple(int(part) for part in text.split("."))


class Gpu(NamedTuple):
    """A compute capability: ``Gpu(12, 0)`` is sm_120 (RTX 50xx, RTX PRO 6000)."""

    major: int
    minor: int

    @property
    def cc(self) -> int:
        return self.major * 10 + self.minor

    @property
    def sm(self) -> str:
        return f"sm_{self.cc}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @classmethod
    def parse(cls, text: str) -> Gpu:
        """``"12.0"``, ``"sm_120"`` or ``"120"``; raises ValueError."""
        match = re.match(r"^(\d+)\.(\d)$", text) or re.match(r"^(?:sm_|compute_)?(\d+)(\d)$", text)
        # Every GPU CUDA 12 and 13 support is compute capability 5.0 or newer.
        if not match or not 5 <= int(match.group(1)) <= 99:
            raise ValueError(f"GPU {text!r} is not a compute capability like 12.0 or sm_120")
        return cls(int(match.group(1)), int(match.group(2)))


def sass_runs(entry: FatbinEntry, gpu: Gpu) -> bool:
    """SASS for sm S runs on the same major at S <= T; an ``a`` cubin only on S == T."""
    if entry.suffix == "a":
        return entry.sm == gpu.cc
    return entry.sm // 10 == gpu.major and entry.sm <= gpu.cc


def ptx_runs(entry: FatbinEntry, gpu: Gpu) -> bool:
    """PTX for compute P JITs at P <= T; ``f`` only within the major; ``a`` only at P == T."""
    if entry.suffix == "a":
        return entry.sm == gpu.cc
    if entry.suffix == "f":
        return entry.sm // 10 == gpu.major and entry.sm <= gpu.cc
    return entry.sm <= gpu.cc


def ptx_driver(isa: Tuple[int, int]) -> Optional[str]:
    """Lowest driver that JITs this PTX ISA; None when the ISA is newer than the table.

    An ISA missing from the table between two known ones (8.6) gets the next
    known one's driver: an upper bound, so the check errs towards "too old".
    """
    later = sorted(v for v in PTX_ISA_CUDA if v >= isa)
    return CUDA_DRIVER[PTX_ISA_CUDA[later[0]]] if later else None


def gpu_driver(gpu: Gpu) -> Optional[str]:
    cuda = GPU_CUDA.get(gpu.cc)
    return CUDA_DRIVER[cuda] if cuda else None


def driver_older(driver: DriverVersion, minimum: str) -> bool:
    """Whether ``driver`` is older than the ``minimum`` a table names."""
    return driver < parse_driver(minimum)


def runtime_driver_problem(runtime: Optional[int], driver: Optional[DriverVersion]) -> Optional[str]:
    """Why ``driver`` cannot run the CUDA ``runtime`` major a library loads; None when it can
    (or when either is unknown)."""
    if driver is None or runtime is None or runtime not in RUNTIME_DRIVER:
        return None
    needed = RUNTIME_DRIVER[runtime]
    return f"CUDA {runtime} runtime needs driver >= {needed}" if driver_older(driver, needed) else None


# --- images --------------------------------------------------------------------


class ContainerVerdict(NamedTuple):
    """The image a container offers a GPU, or why it offers none."""

    container: FatbinContainer
    verdict: str
    image: Optional[FatbinEntry]
    reason: str


class ImageReport(NamedTuple):
    """Images of one file for one GPU: per container, counted, and the worst."""

    verdict: str
    containers: Tuple[ContainerVerdict, ...]
    counts: Dict[str, int]
    summary: str


def judge_container(
    container: FatbinContainer, gpu: Gpu, driver: Optional[DriverVersion]
) -> ContainerVerdict:
    """SASS first (the highest sm that runs), else PTX the driver can JIT, else nothing."""
    if container.error:
        return ContainerVerdict(container, UNKNOWN, None, container.error)
    if not container.entries:
        return ContainerVerdict(container, NO_KERNELS, None, "empty container")
    usable = [e for e in container.entries if e.usable]
    sass = sorted((e for e in usable if e.kind == KIND_ELF and sass_runs(e, gpu)), key=lambda e: -e.sm)
    if sass:
        return ContainerVerdict(container, NATIVE, sass[0], f"SASS {sass[0].arch}")
    problems: List[str] = []
    for entry in sorted((e for e in usable if e.kind == KIND_PTX and ptx_runs(e, gpu)), key=lambda e: -e.sm):
        isa = f"PTX ISA {entry.ptx_isa}"
        if driver is None:
            return ContainerVerdict(container, JIT, entry, f"JIT from {entry.arch} ({isa})")
        needed = ptx_driver(entry.version)
        if needed is None:
            problems.append(f"{isa} is newer than envlock knows")
        elif driver_older(driver, needed):
            problems.append(f"{isa} needs driver >= {needed}")
        else:
            return ContainerVerdict(container, JIT, entry, f"JIT from {entry.arch} ({isa})")
    odd = [e for e in container.entries if not e.usable]
    if odd or any("newer than" in p for p in problems):
        first = odd[0] if odd else None
        why = problems[0] if not first else (first.error or _unusable_reason(first))
        return ContainerVerdict(container, UNKNOWN, None, why)
    reason = f"no image for {gpu.sm} ({_offer(container.entries)})"
    if problems:
        reason += "; " + problems[0]
    return ContainerVerdict(container, NO_IMAGE, None, reason)


def _unusable_reason(entry: FatbinEntry) -> str:
    if entry.compression == "unknown":
        return f"{entry.arch} at {entry.offset:#x}: compression not understood (flags {entry.flags:#x})"
    return f"{entry.arch} at {entry.offset:#x}: flags {entry.unexplained_flags:#x} not understood"


def _offer(entries: Iterable[FatbinEntry]) -> str:
    sass = sorted({e.arch for e in entries if e.kind == KIND_ELF})
    ptx = sorted({e.arch for e in entries if e.kind == KIND_PTX})
    return "SASS {}; {}".format(", ".join(sass) or "none", ("PTX " + ", ".join(ptx)) if ptx else "no PTX")


def judge_images(
    containers: Sequence[FatbinContainer],
    gpu: Gpu,
    driver: Optional[DriverVersion],
    has_kernels: Optional[Callable[[FatbinContainer], Optional[bool]]] = None,
) -> ImageReport:
    """Per-container verdicts and the library's worst, with counts.

    Only executable containers count (relocatable ``-rdc`` code is never
    loaded), unless a file has nothing else. A container without an image
    is opened (``has_kernels``) to see whether it holds kernels at all; the
    device-link container nvcc adds to shared builds usually does not.
    ``has_kernels`` answers None when it cannot tell (or will not spend more
    time): such a container counts as having kernels.
    """
    only_relocatable = all(c.relocatable for c in containers)
    verdicts: List[ContainerVerdict] = []
    for container in containers:
        if container.relocatable and not only_relocatable:
            verdicts.append(
                ContainerVerdict(container, RELOCATABLE, None, "relocatable device code, not loaded")
            )
        else:
            verdicts.append(judge_container(container, gpu, driver))
    runs_somewhere = any(v.verdict in (NATIVE, JIT) for v in verdicts)
    for i, verdict in enumerate(verdicts):
        if verdict.verdict != NO_IMAGE:
            continue
        container = verdict.container
        targeted = _targeted(container)
        if runs_somewhere and targeted:
            verdicts[i] = ContainerVerdict(container, OTHER_GPU, None, f"kernels targeted at {targeted} only")
        elif has_kernels is not None and has_kernels(container) is False:
            verdicts[i] = ContainerVerdict(container, NO_KERNELS, None, "no kernels; " + verdict.reason)
    counted = [v for v in verdicts if v.verdict in VERDICTS]
    counts = {name: sum(1 for v in counted if v.verdict == name) for name in (NATIVE, JIT, NO_IMAGE, UNKNOWN)}
    counts[NO_KERNELS] = sum(1 for v in verdicts if v.verdict == NO_KERNELS)
    counts[RELOCATABLE] = sum(1 for v in verdicts if v.verdict == RELOCATABLE)
    counts[OTHER_GPU] = sum(1 for v in verdicts if v.verdict == OTHER_GPU)
    overall = worst(v.verdict for v in counted) if counted else NATIVE
    return ImageReport(overall, tuple(verdicts), counts, _summary(gpu, counted, counts, bool(containers)))


def _summary(gpu: Gpu, counted: Sequence[ContainerVerdict], counts: Mapping[str, int], any_code: bool) -> str:
    if not any_code:
        return "no device code"
    total = len(counted)
    if not total:
        return f"{gpu.sm}: no kernels in its fatbin sections"
    text = f"{gpu.sm}: {counts[NATIVE]}/{total} containers native"
    if counts[JIT]:
        arches = sorted({v.image.arch for v in counted if v.verdict == JIT and v.image is not None})
        text += f", {counts[JIT]} JIT from PTX {', '.join(arches)} (slow first load)"
    if counts[NO_IMAGE]:
        has_ptx = any(e.kind == KIND_PTX for v in counted for e in v.container.entries)
        text += f", {counts[NO_IMAGE]} with no image" + ("" if has_ptx else ", no PTX")
    if counts[UNKNOWN]:
        text += f", {counts[UNKNOWN]} not understood"
    if counts[OTHER_GPU]:
        text += f" (+{counts[OTHER_GPU]} arch-specific for other GPUs)"
    return text


def _targeted(container: FatbinContainer) -> Optional[str]:
    """The arches of a container built for particular GPUs rather than for all of them.

    NVIDIA's libraries (cuBLASLt, cuDNN, NCCL, cuSPARSELt) and extensions
    such as vLLM's keep kernels tuned for one or two GPU generations in
    containers of their own ({sm_90a}, {sm_80, sm_90a}, {sm_100f}, {sm_100,
    sm_90}) and launch them only on those GPUs. A container counts as
    targeted when it carries an arch-specific (``a``) or family (``f``)
    image, or spans at most two GPU generations; a generic build (torch, a
    typical extension) spans three or more. Only meaningful when the library
    has images for the GPU in other containers.
    """
    generations = set()
    for entry in container.entries:
        if not entry.usable:
            return None
        generations.add(entry.sm // 10)
    if len(generations) <= 2 or any(e.suffix for e in container.entries):
        return ", ".join(sorted({e.arch for e in container.entries}))
    return None


def worst(verdicts: Iterable[str]) -> str:
    """The most severe verdict (``native`` for none)."""
    return max(verdicts, key=VERDICTS.index, default=NATIVE)


def best(verdicts: Iterable[str]) -> str:
    """The least severe verdict (``no-image`` for none)."""
    return min(verdicts, key=VERDICTS.index, default=NO_IMAGE)
