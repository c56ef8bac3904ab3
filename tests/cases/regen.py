"""Golden cases for ``envlock review``: build the locks, regenerate the expected output.

    .venv/bin/python tests/cases/regen.py          # every case
    .venv/bin/python tests/cases/regen.py yanked   # one case

Each case directory holds ``base.toml`` and ``head.toml`` (the lock before
and after a pull request; ``*.files.tsv`` manifests where per-file detail
matters; ``index/`` where the yanked check needs an index) and the
expected ``expected.md`` and ``expected.json``. The locks are built here
from the lock model (fake but well-formed sha256 values); the expected
files are what the review prints for them, to be read by eye after every
regeneration: ``git diff tests/cases`` is the review of a review change.

Paths inside a case are written as ``@CASE_DIR@`` and replaced by the case
directory when the case runs, so file:// index URLs work from any checkout.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from envlock.lock.io import render_lock  # noqa: E402
from envlock.lock.model import HostLibraries, Lock, Package  # noqa: E402
from envlock.review import LockVersions, ReviewOptions, review_versions  # noqa: E402
from envlock.review.jsonout import render_json  # noqa: E402
from envlock.review.markdown import render_markdown  # noqa: E402
from lockfactory import (  # noqa: E402
    HAS_CUDA_IMAGES,
    INDEX,
    lib,
    make_lock,
    pkg,
    rows_for,
    with_manifest,
)

PLACEHOLDER = "@CASE_DIR@"
Case = tuple[Lock, bytes | None, Lock, bytes | None]


def _common() -> list[Package]:
    return [pkg("numpy", "2.2.6"), pkg("requests", "2.32.3"), pkg("six", "1.17.0")]


def same_name_different_bytes() -> Case:
    base_pkgs = [*_common(), pkg("safetensors", "0.5.3", files=4)]
    head_pkgs = [*_common(), pkg("safetensors", "0.5.3", files=4, label="rebuilt")]
    base, base_m = with_manifest(make_lock("ct200", base_pkgs), rows_for(base_pkgs))
    changed = {"site-packages/safetensors/m2.py": "injected"}
    head, head_m = with_manifest(make_lock("ct200", head_pkgs), rows_for(head_pkgs, changed))
    return base, base_m, head, head_m


def gpu_arch_lost() -> Case:
    kernel = "site-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"
    base = [*_common(), pkg("flash-attn", "2.7.4", native=[lib(kernel, cuda=True)])]
    head = [*_common(), pkg("flash-attn", "2.8.0", native=[lib(kernel, cuda=False, label="cpu")])]
    return make_lock("ct200", base, cc=["12.0"]), None, make_lock("ct200", head, cc=["12.0"]), None


def gpu_arch_lost_per_arch() -> Case:
    """Per-arch facts: the upgrade keeps Hopper code and drops Blackwell's; the host is cc 12.0."""
    kernel = "site-packages/sgl_kernel/common_ops.abi3.so"
    base = [*_common(), pkg("sgl-kernel", "0.3.9", native=[lib(kernel, images={"sm_90a": 8, "sm_120a": 8})])]
    head = [*_common(), pkg("sgl-kernel", "0.3.10", native=[lib(kernel, images={"sm_90a": 9}, label="h")])]
    return make_lock("ct200", base, cc=["12.0"]), None, make_lock("ct200", head, cc=["12.0"]), None


def arch_dropped() -> Case:
    """Per-arch facts: an arch no GPU of this host uses goes away (cc 9.0 keeps its sm_90)."""
    kernel = "site-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"
    base = [
        *_common(),
        pkg("flash-attn", "2.7.4", native=[lib(kernel, images={"sm_80": 4, "sm_90": 4, "sm_120": 4})]),
    ]
    head = [*_common(), pkg("flash-attn", "2.8.0", native=[lib(kernel, images={"sm_90": 4}, label="h")])]
    return make_lock("ct129", base, cc=["9.0"]), None, make_lock("ct129", head, cc=["9.0"]), None


def native_needed_unresolved() -> Case:
    """The seed case as a pull request: the cu12 runtime swapped for cu13 under an unchanged kernel."""
    ops = lib(
        "site-packages/sgl_kernel/common_ops.abi3.so", needed=("libcudart.so.12", "libc.so.6"), cuda=True
    )
    cu12 = lib("site-packages/nvidia/cuda_runtime/lib/libcudart.so.12", soname="libcudart.so.12")
    cu13 = lib("site-packages/nvidia/cu13/lib/libcudart.so.13", soname="libcudart.so.13")
    shared = [*_common(), pkg("sgl-kernel", "0.3.9", native=[ops])]
    base = [*shared, pkg("nvidia-cuda-runtime-cu12", "12.8.90", native=[cu12])]
    head = [*shared, pkg("nvidia-cuda-runtime", "13.0.96", native=[cu13])]
    # ct200's capture says its loader finds no libcudart.so.12 (without that fact: a warning).
    facts = HostLibraries(missing=("libcudart.so.12",))
    head_lock = make_lock("ct200", head, cc=["12.0"], host_libraries=facts)
    return make_lock("ct200", base, cc=["12.0"]), None, head_lock, None


def abi_break() -> Case:
    """Issue 16's seed: torch upgraded under an unchanged sgl-kernel that takes c10 symbols from it."""
    taken = ("_ZN3c1013MessageLoggerC1EPKcii", "_ZN3c1015SmallVectorBase8grow_podEPvmm")
    ops = replace(
        lib("site-packages/sgl_kernel/common_ops.abi3.so", needed=("libc10.so", "libc.so.6")),
        takes={"torch": taken},
    )
    c10_old = replace(lib("site-packages/torch/lib/libc10.so", soname="libc10.so"), provides=taken)
    # 2.9.0 still exports the first symbol; the second went away (its signature changed).
    c10_new = replace(
        lib("site-packages/torch/lib/libc10.so", soname="libc10.so", label="2.9"), provides=taken[:1]
    )
    shared = [*_common(), pkg("sgl-kernel", "0.3.9", native=[ops])]
    base = [*shared, pkg("torch", "2.8.0", native=[c10_old])]
    head = [*shared, pkg("torch", "2.9.0", native=[c10_new])]
    return make_lock("ct200", base), None, make_lock("ct200", head), None


def native_glibc_too_new() -> Case:
    old = lib("site-packages/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so", glibc="2.17")
    new = lib(
        "site-packages/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so", glibc="2.38", label="n"
    )
    base = [pkg("numpy", "2.2.6", native=[old]), pkg("six", "1.17.0")]
    head = [pkg("numpy", "2.3.1", native=[new]), pkg("six", "1.17.0")]
    return make_lock("ct200", base, glibc="2.35"), None, make_lock("ct200", head, glibc="2.35"), None


def local_build() -> Case:
    base = [*_common()]
    head = [
        pkg("numpy", "2.2.6"),
        pkg("requests", "2.32.3", source="repacked", reason="hand-patched: 1 file(s) differ from RECORD"),
        pkg("six", "1.17.0"),
        pkg("mykernels", "0.1.0", source="repacked", reason="built locally from /src/mykernels"),
    ]
    return make_lock("ct200", base), None, make_lock("ct200", head), None


def local_version_label() -> Case:
    base = [
        *_common(),
        pkg("torch", "2.8.0+cu126", filename="torch-2.8.0+cu126-cp311-cp311-linux_x86_64.whl"),
    ]
    head = [
        *_common(),
        pkg("torch", "2.8.0+cu128", filename="torch-2.8.0+cu128-cp311-cp311-linux_x86_64.whl"),
    ]
    return make_lock("ct200", base), None, make_lock("ct200", head), None


def downgrade() -> Case:
    base = [*_common(), pkg("transformers", "4.56.1")]
    head = [*_common(), pkg("transformers", "4.55.4")]
    return make_lock("ct200", base), None, make_lock("ct200", head), None


def new_native_code() -> Case:
    tok = "site-packages/tokenizers/tokenizers.abi3.so"
    base = [*_common(), pkg("tokenizers", "0.21.4", native=[lib(tok)])]
    head = [
        *_common(),
        pkg(
            "tokenizers",
            "0.22.0",
            native=[
                lib(tok, needed=("libc.so.6", "libgomp-24e2ab19.so.1.0.0"), label="0.22"),
                lib("site-packages/tokenizers/_fast.abi3.so", label="0.22"),
                # auditwheel vendors the OpenMP runtime under a hashed name: NEEDED is satisfied.
                lib(
                    "site-packages/tokenizers.libs/libgomp-24e2ab19.so.1.0.0",
                    soname="libgomp-24e2ab19.so.1.0.0",
                ),
            ],
        ),
        pkg("xformers", "0.0.32", native=[lib("site-packages/xformers/_C.so", cuda=True)]),
    ]
    return make_lock("ct200", base), None, make_lock("ct200", head), None


def yanked() -> Case:
    local = f"file://{PLACEHOLDER}/index/simple"
    base = [pkg("six", "1.17.0", index=local), pkg("idna", "3.9", index=local)]
    head = [pkg("six", "1.17.0", index=local), pkg("idna", "3.10", index=local)]
    return (
        make_lock("ct200", base, indexes=[local]),
        None,
        make_lock("ct200", head, indexes=[local]),
        None,
    )


def _yanked_index(case_dir: Path) -> None:
    """A PEP 503 page on which idna 3.10 is yanked."""
    page = case_dir / "index" / "simple" / "idna"
    page.mkdir(parents=True, exist_ok=True)
    links = [
        '<a href="../../files/idna-3.9-py3-none-any.whl">idna-3.9-py3-none-any.whl</a>',
        '<a href="../../files/idna-3.10-py3-none-any.whl" data-yanked="bad metadata">'
        "idna-3.10-py3-none-any.whl</a>",
    ]
    (page / "index.html").write_text(
        "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
    )


def index_changed() -> Case:
    mirror = "https://mirror.example/simple"
    base = [*_common()]
    head = [pkg("numpy", "2.2.6", index=mirror), pkg("requests", "2.32.3"), pkg("six", "1.17.0")]
    return (
        make_lock("ct200", base),
        None,
        make_lock("ct200", head, indexes=[INDEX, mirror]),
        None,
    )


def info_only() -> Case:
    base = [*_common(), pkg("tqdm", "4.67.1")]
    head = [
        pkg("numpy", "2.3.1"),
        pkg("requests", "2.32.3"),
        pkg("six", "1.17.0"),
        pkg("llguidance", "1.3.0"),
    ]
    return make_lock("ct200", base), None, make_lock("ct200", head), None


def unchanged_bookkeeping() -> Case:
    """Only the ``requested`` flag differs: nothing to review."""
    base = [*_common()]
    head = [replace(p, requested=True) if p.name == "six" else p for p in _common()]
    return make_lock("ct200", base), None, make_lock("ct200", head), None


def escaping() -> Case:
    """A reason with a pipe, an @mention and HTML must not break the Markdown."""
    reason = "built locally from git+https://git@example.com/team/kernels.git | see @octocat <script>"
    base = [*_common()]
    head = [*_common(), pkg("team-kernels", "0.1.0+local", source="repacked", reason=reason)]
    return make_lock("ct200", base), None, make_lock("ct200", head), None


CASES: dict[str, Callable[[], Case]] = {
    "same-name-different-bytes": same_name_different_bytes,
    "gpu-arch-lost": gpu_arch_lost,
    "gpu-arch-lost-per-arch": gpu_arch_lost_per_arch,
    "arch-dropped": arch_dropped,
    "native-needed-unresolved": native_needed_unresolved,
    "abi-break": abi_break,
    "native-glibc-too-new": native_glibc_too_new,
    "local-build": local_build,
    "local-version-label": local_version_label,
    "downgrade": downgrade,
    "new-native-code": new_native_code,
    "yanked": yanked,
    "index-changed": index_changed,
    "info-only": info_only,
    "unchanged-bookkeeping": unchanged_bookkeeping,
    "escaping": escaping,
}
EXTRA: dict[str, Callable[[Path], None]] = {"yanked": _yanked_index}
# Cases whose locks carry per-arch device-code facts (``cuda-images``).
NEEDS_CUDA_IMAGES = {"gpu-arch-lost-per-arch", "arch-dropped"}


def _read(path: Path, case_dir: Path) -> bytes | None:
    if not path.is_file():
        return None
    return path.read_bytes().replace(PLACEHOLDER.encode(), str(case_dir).encode())


def run_case(case_dir: Path) -> tuple[str, str]:
    """Review a case directory as the test does; returns (markdown, json), paths as @CASE_DIR@."""
    versions = LockVersions(
        path="locks/pylock.ct200.toml",
        base=_read(case_dir / "base.toml", case_dir),
        head=_read(case_dir / "head.toml", case_dir),
        base_manifest=_read(case_dir / "base.files.tsv", case_dir),
        head_manifest=_read(case_dir / "head.files.tsv", case_dir),
    )
    options = ReviewOptions(check_yanked=(case_dir / "index").is_dir())
    review = review_versions([versions], "base.toml", "head.toml", options)
    markdown = render_markdown(review).replace(str(case_dir), PLACEHOLDER)
    json_text = render_json(review).replace(str(case_dir), PLACEHOLDER) + "\n"
    return markdown, json_text


def regenerate(name: str) -> Path:
    case_dir = HERE / name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir()
    base, base_manifest, head, head_manifest = CASES[name]()
    (case_dir / "base.toml").write_bytes(render_lock(base))
    (case_dir / "head.toml").write_bytes(render_lock(head))
    if base_manifest is not None and head_manifest is not None:
        (case_dir / "base.files.tsv").write_bytes(base_manifest)
        (case_dir / "head.files.tsv").write_bytes(head_manifest)
    if name in EXTRA:
        EXTRA[name](case_dir)
    markdown, json_text = run_case(case_dir)
    (case_dir / "expected.md").write_text(markdown)
    (case_dir / "expected.json").write_text(json_text)
    return case_dir


def main(names: list[str]) -> int:
    for name in names or list(CASES):
        if name in NEEDS_CUDA_IMAGES and not HAS_CUDA_IMAGES:
            print(f"{name}: skipped, this lock model has no cuda_images")
            continue
        print(regenerate(name).relative_to(HERE.parent.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
