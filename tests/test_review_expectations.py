"""Golden review cases, held to a hand-written expectation per case.

``expected.md``/``expected.json`` in ``tests/cases`` are what ``regen.py``
printed: they catch an unintended change, but were written by the code
under test. The table below was written from REVIEW.md's severity rules
by reading each case's locks (``regen.py``), not from any output: the
blocking and warning findings a reviewer must see, exactly, and the
version-table rows. The review runs live here (``run_case``); a finding
that appears, disappears or changes severity fails, whatever the golden
files say.

Also the repacked exemption (findings.py): same file name with other bytes
is a block only when both sides claim to be the index's file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "cases"))

from regen import CASES, NEEDS_CUDA_IMAGES, run_case

from envlock.changes import PackageChange
from envlock.review.findings import package_findings
from lockfactory import HAS_CUDA_IMAGES, pkg

CASES_DIR = Path(__file__).parent / "cases"
Seen = set[tuple[str | None, str, str]]  # (package or None for the lock, code, severity)

# From REVIEW.md, "What a reviewer must see": block and warn findings only.
SERIOUS: dict[str, Seen] = {
    # same version, same file name, different sha256
    "same-name-different-bytes": {("safetensors", "same-name-different-bytes", "block")},
    # the kernel lost its device code; the host is cc 12.0
    "gpu-arch-lost": {("flash-attn", "gpu-arch-lost", "block")},
    # sm_120a is gone, only sm_90a left; the host is cc 12.0
    "gpu-arch-lost-per-arch": {("sgl-kernel", "gpu-arch-lost", "block")},
    # sm_80 and sm_120 dropped, the cc 9.0 host keeps sm_90
    "arch-dropped": {("flash-attn", "arch-dropped", "warn")},
    # libcudart.so.12 gone: sgl-kernel will not load; the cu13 runtime is a new native library
    "native-needed-unresolved": {
        ("sgl-kernel", "native-unloadable", "block"),
        ("nvidia-cuda-runtime", "new-native-library", "warn"),
    },
    # GLIBC_2.38 needed on a glibc 2.35 host
    "native-glibc-too-new": {("numpy", "native-unloadable", "block")},
    # a hand-patched package and a locally built one
    "local-build": {("requests", "local-build", "warn"), ("mykernels", "local-build", "warn")},
    "local-version-label": {("torch", "local-version-label", "warn")},
    "downgrade": {("transformers", "downgrade", "warn")},
    # a new DT_NEEDED (vendored, so it loads), a new extension module, a new package with CUDA code
    "new-native-code": {
        ("tokenizers", "new-needed", "warn"),
        ("tokenizers", "new-native-library", "warn"),
        ("xformers", "new-native-library", "warn"),
    },
    "yanked": {("idna", "yanked", "warn")},
    # numpy now comes from the mirror, and the lock's index list gained it
    "index-changed": {("numpy", "index-changed", "warn"), (None, "index-changed", "warn")},
    "info-only": set(),
    "unchanged-bookkeeping": set(),
    # a locally built package; its reason carries a pipe, an @mention and HTML
    "escaping": {("team-kernels", "local-build", "warn")},
    # torch 2.8.0 -> 2.9.0 under a kept sgl-kernel whose common_ops takes a c10 symbol
    # that 2.9.0's libc10.so no longer exports: it would fail to import (ABI facts, issue 16)
    "abi-break": {("sgl-kernel", "abi-break", "block")},
}

# The version table (info): (package, kind) per case where it says something.
VERSIONS: dict[str, set[tuple[str, str]]] = {
    "info-only": {("numpy", "upgrade"), ("tqdm", "removed"), ("llguidance", "added")},
    "downgrade": {("transformers", "downgrade")},
    "native-needed-unresolved": {("nvidia-cuda-runtime-cu12", "removed"), ("nvidia-cuda-runtime", "added")},
    "unchanged-bookkeeping": set(),
    "abi-break": {("torch", "upgrade")},
}


def _live(name: str) -> dict[str, Any]:
    if name in NEEDS_CUDA_IMAGES and not HAS_CUDA_IMAGES:
        pytest.skip("the lock model has no per-arch device-code facts")
    _markdown, json_text = run_case(CASES_DIR / name)
    return dict(json.loads(json_text))


def test_every_case_has_a_hand_written_expectation() -> None:
    assert set(SERIOUS) == set(CASES)


@pytest.mark.parametrize("name", sorted(SERIOUS))
def test_case_findings_are_what_review_md_says(name: str) -> None:
    data = _live(name)
    seen: Seen = set()
    for change in data["changes"]:
        for f in change["findings"]:
            if f["severity"] in ("block", "warn"):
                seen.add((change["package"], f["code"], f["severity"]))
    for lock in data["locks"]:
        for f in lock["findings"]:
            if f["severity"] in ("block", "warn"):
                seen.add((f.get("package"), f["code"], f["severity"]))
    assert seen == SERIOUS[name]
    blocks = sum(1 for _p, _c, s in SERIOUS[name] if s == "block")
    assert data["summary"]["block"] == blocks


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_case_version_table(name: str) -> None:
    data = _live(name)
    kinds = {(c["package"], c["kind"]) for c in data["changes"] if c["kind"] != "artifact"}
    assert kinds == VERSIONS[name]


# ---------------------------------------------------------------- repacked exemption


def _codes(before_source: str, after_source: str) -> dict[str, str]:
    before = pkg("torch", "2.8.0", source=before_source)
    after = pkg("torch", "2.8.0", source=after_source, label="patched")
    assert before.wheel.filename == after.wheel.filename and before.wheel.sha256 != after.wheel.sha256
    change = PackageChange("torch", "artifact", before, after)
    return {f.code: f.severity for f in package_findings(change, (), None)}


def test_same_name_other_bytes_from_the_index_blocks() -> None:
    assert _codes("index", "index").get("same-name-different-bytes") == "block"


@pytest.mark.parametrize(("before", "after"), [("index", "repacked"), ("repacked", "index")])
def test_a_repacked_side_is_a_local_build_not_a_block(before: str, after: str) -> None:
    codes = _codes(before, after)
    assert "same-name-different-bytes" not in codes
    if after == "repacked":
        assert codes["local-build"] == "warn"
