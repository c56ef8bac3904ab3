"""GPU arch coverage of a native library, and the per-arch verdicts.

The rule (docs/cuda.md, "Will it run on compute capability X.Y"): a plain or
``f`` cubin for sm_S runs when S has the host's major and S <= T; an ``a``
cubin only when S == T; PTX for compute_P runs (JIT) when P <= T (``f``:
same major too, ``a``: P == T).

``device_code`` reads what the lock records about a library:

- ``cuda-images`` (written by the CUDA reader): per arch, how many of the
  library's executable fatbin containers hold an image for it. An arch
  found in every container decides for the whole library; one found in
  only some containers leaves the verdict "unknown" (the per-container
  decision is ``envlock inspect``'s).
- otherwise only ``cuda-sections`` sizes: then "device code present or not"
  is all that is known, and the review can only see device code disappear
  altogether.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from envlock.lock.model import CudaImages, NativeLib

Verdict = Literal["runs", "no", "unknown"]


@dataclass(frozen=True, slots=True)
class DeviceCode:
    """The device code of one library. ``sass``/``ptx`` None: not recorded in the lock."""

    present: bool
    sass: frozenset[str] | None = None  # "sm_90", "sm_90a", "sm_100f", ...
    ptx: frozenset[str] | None = None  # "compute_90", ...
    # Images that every executable container holds (None: all of sass and ptx).
    everywhere: frozenset[str] | None = None


def device_code(lib: NativeLib) -> DeviceCode:
    """What the lock says about ``lib``'s device code."""
    present = any(size > 0 for size in lib.cuda_sections.values())
    if lib.cuda_images is None:  # a lock written before the CUDA reader, or no device code
        return DeviceCode(present=present)
    return from_images(lib.cuda_images, present)


def from_images(facts: CudaImages, present: bool = True) -> DeviceCode:
    """A DeviceCode from a lock's ``cuda-images`` table."""
    images, containers = facts.images, facts.containers
    sass = frozenset(a for a in images if a.startswith("sm_"))
    ptx = frozenset(a for a in images if a.startswith("compute_"))
    everywhere = frozenset(a for a, n in images.items() if containers and n >= containers)
    return DeviceCode(present=present or bool(images), sass=sass, ptx=ptx, everywhere=everywhere)


def _arch(image: str) -> tuple[int, str]:
    """``sm_120a`` -> (120, "a"); ``compute_90`` -> (90, "")."""
    number = image.split("_", 1)[1]
    suffix = number[-1] if number[-1] in "af" else ""
    return int(number.rstrip("af")), suffix


def _cc(cc: str) -> int:
    major, minor = cc.split(".", 1)
    return int(major) * 10 + int(minor)


def _image_runs(image: str, target: int) -> bool:
    try:
        arch, suffix = _arch(image)
    except (IndexError, ValueError):
        return False  # an image name this reader does not know runs nowhere it can vouch for
    if suffix == "a":
        return arch == target
    if image.startswith("compute_") and suffix == "":
        return arch <= target  # PTX JIT compiles forward
    return arch // 10 == target // 10 and arch <= target


def verdict(code: DeviceCode, cc: str) -> Verdict:
    """Will some image of ``code`` run on compute capability ``cc``?"""
    if not code.present:
        return "no"
    if code.sass is None or code.ptx is None:
        return "unknown"
    target = _cc(cc)
    runnable = {image for image in code.sass | code.ptx if _image_runs(image, target)}
    if not runnable:
        return "no"
    if code.everywhere is None or runnable & code.everywhere:
        return "runs"
    return "unknown"  # only some containers have an image for this GPU


def coverage_lost(before: DeviceCode, after: DeviceCode, ccs: Iterable[str]) -> list[str]:
    """Host compute capabilities (or "any GPU" when none are known) that lose their last image."""
    if not before.present:
        return []
    targets = list(ccs)
    if not targets:
        return ["any GPU"] if not after.present else []
    return [cc for cc in targets if verdict(before, cc) != "no" and verdict(after, cc) == "no"]


def arches_dropped(before: DeviceCode, after: DeviceCode, ccs: Iterable[str]) -> list[str]:
    """Images gone that no host GPU uses (a warning, not a block); [] when unknown."""
    if before.sass is None or after.sass is None or before.ptx is None or after.ptx is None:
        return []
    gone = (before.sass - after.sass) | (before.ptx - after.ptx)
    targets = [_cc(cc) for cc in ccs]
    return sorted(image for image in gone if not any(_image_runs(image, t) for t in targets))
