"""envlock review: golden cases, git revisions through the real CLI, Markdown limits, properties."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent / "cases"))

from regen import CASES, NEEDS_CUDA_IMAGES, run_case

from envlock.lock.io import render_lock
from envlock.lock.model import Lock, Package
from envlock.review import LockVersions, ReviewOptions, review_versions
from envlock.review.gpu import DeviceCode, arches_dropped, coverage_lost, verdict
from envlock.review.markdown import LIMIT, MARKER, escape, render_markdown
from helpers import GIT_ENV, run_envlock
from lockfactory import (
    HAS_CUDA_IMAGES,
    lib,
    make_lock,
    pkg,
    rows_for,
    seed_locks,
    with_manifest,
    write_lock_files,
)

CASES_DIR = Path(__file__).parent / "cases"


# ---------------------------------------------------------------- golden cases


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_case(name: str) -> None:
    if name in NEEDS_CUDA_IMAGES and not HAS_CUDA_IMAGES:
        pytest.skip("the lock model has no per-arch device-code facts")
    case_dir = CASES_DIR / name
    markdown, json_text = run_case(case_dir)
    assert markdown == (case_dir / "expected.md").read_text(), f"regenerate with tests/cases/regen.py {name}"
    assert json_text == (case_dir / "expected.json").read_text(), (
        f"regenerate with tests/cases/regen.py {name}"
    )


def _codes(name: str) -> dict[str, set[tuple[str | None, str]]]:
    """{severity: {(package, code)}} of the review of a case, run now (not its stored JSON)."""
    data = json.loads(run_case(CASES_DIR / name)[1])
    found: dict[str, set[tuple[str | None, str]]] = {"block": set(), "warn": set(), "info": set()}
    for change in data["changes"]:
        for f in change["findings"]:
            found[f["severity"]].add((change["package"], f["code"]))
    for lock in data["locks"]:
        for f in lock["findings"]:
            found[f["severity"]].add((f.get("package"), f["code"]))
    return found


def test_every_review_md_finding_has_a_case_with_its_severity() -> None:
    """The review says what REVIEW.md says (see also test_review_expectations.py)."""
    expect = {
        "same-name-different-bytes": ("block", "safetensors", "same-name-different-bytes"),
        "gpu-arch-lost": ("block", "flash-attn", "gpu-arch-lost"),
        "native-needed-unresolved": ("block", "sgl-kernel", "native-unloadable"),
        "abi-break": ("block", "sgl-kernel", "abi-break"),
        "native-glibc-too-new": ("block", "numpy", "native-unloadable"),
        "local-build": ("warn", "mykernels", "local-build"),
        "local-version-label": ("warn", "torch", "local-version-label"),
        "downgrade": ("warn", "transformers", "downgrade"),
        "new-native-code": ("warn", "tokenizers", "new-needed"),
        "yanked": ("warn", "idna", "yanked"),
        "index-changed": ("warn", "numpy", "index-changed"),
        "info-only": ("info", "llguidance", "added"),
    }
    for case, (severity, package, code) in expect.items():
        assert (package, code) in _codes(case)[severity], case
    if HAS_CUDA_IMAGES:
        assert ("sgl-kernel", "gpu-arch-lost") in _codes("gpu-arch-lost-per-arch")["block"]
        assert ("flash-attn", "arch-dropped") in _codes("arch-dropped")["warn"]
        assert not _codes("arch-dropped")["block"]
    assert ("xformers", "new-native-library") in _codes("new-native-code")["warn"]
    assert ("requests", "local-build") in _codes("local-build")["warn"]
    info = _codes("info-only")
    assert {("numpy", "upgrade"), ("tqdm", "removed")} <= info["info"]
    assert not info["block"] and not info["warn"]
    assert _codes("unchanged-bookkeeping") == {"block": set(), "warn": set(), "info": set()}


def test_golden_markdown_shape() -> None:
    text = run_case(CASES_DIR / "native-needed-unresolved")[0]
    lines = text.splitlines()
    assert lines[0] == MARKER
    assert lines[1].startswith("**envlock review: 1 blocking · 1 warning · 2 info**")
    assert "GPU cc 12.0" in lines[1] and "5 → 5 packages" in lines[1]
    assert text.index("### Blocking") < text.index("### Warnings") < text.index("### Versions")
    assert text.index("### Versions") < text.index("<details>")
    assert "sgl_kernel common_ops: needs libcudart.so.12, which nothing in the venv provides" in text
    escaped = run_case(CASES_DIR / "escaping")[0]
    assert "\\| see @\u200boctocat &lt;script>" in escaped
    assert "@octocat" not in escaped and "<script>" not in escaped


# ---------------------------------------------------------------- renderers


def test_escape_defuses_pipes_mentions_and_html() -> None:
    assert escape("a|b") == "a\\|b"
    assert escape("@team/reviewers") == "@\u200bteam/reviewers"
    assert escape("<img src=x>") == "&lt;img src=x>"
    assert escape("x\ny`z") == "x y\\`z"


def _big_review(packages: int) -> str:
    base_pkgs = [pkg(f"package-with-a-fairly-long-name-{i:05d}", "1.0") for i in range(packages)]
    head_pkgs = [pkg(p.name, "0.9") for p in base_pkgs]  # every one a downgrade: a warning each
    base, head = make_lock("ct200", base_pkgs), make_lock("ct200", head_pkgs)
    versions = LockVersions("locks/pylock.ct200.toml", render_lock(base), render_lock(head))
    return render_markdown(review_versions([versions], "base", "head", ReviewOptions(check_yanked=False)))


def test_markdown_stays_under_the_comment_limit_and_says_what_was_cut() -> None:
    text = _big_review(1500)
    assert len(text) <= LIMIT
    assert text.startswith(MARKER + "\n**envlock review: 0 blocking · 1500 warnings")
    tail = text.rstrip().splitlines()[-1]
    assert tail.startswith("_Cut to stay under GitHub's 65,536-character comment limit:")
    assert "warning rows, 1500 version rows, 1500 per-package details" in tail
    assert text.count("<details>") == text.count("</details>")


def test_small_review_is_not_cut() -> None:
    text = _big_review(20)
    assert "_Cut to stay" not in text
    assert text.count("\n| downgrade | ") == 20  # version rows
    assert text.count("| downgrade | 1.0 -> 0.9 |") == 20  # warning rows


def test_text_and_json_formats_agree() -> None:
    from envlock.review.jsonout import review_json
    from envlock.review.text import render_text

    ct129, ct200 = seed_locks()
    old = replace(ct200, host="ct200")
    new = replace(ct129, host="ct200")
    versions = LockVersions("locks/pylock.ct200.toml", render_lock(old), render_lock(new))
    review = review_versions([versions], "base", "head", ReviewOptions(check_yanked=False))
    data = review_json(review)
    assert data["summary"]["failed"] is False  # ct129's set loads: the cu12 runtime comes back
    kinds = {c["package"]: c["kind"] for c in data["changes"]}
    assert kinds["xgrammar"] == "upgrade" and kinds["llguidance"] == "added"
    text = render_text(review)
    assert "xgrammar" in text and "0.1.10 -> 0.1.32" in text
    assert text.splitlines()[-1].startswith(f"{data['summary']['block']} blocking, 1 warning, ")
    assert data["summary"]["warn"] == 1


# ---------------------------------------------------------------- GPU seam


def test_arch_verdicts_follow_cuda_md() -> None:
    sm120 = DeviceCode(True, frozenset({"sm_120"}), frozenset())
    assert verdict(sm120, "12.0") == "runs" and verdict(sm120, "12.1") == "runs"
    assert verdict(DeviceCode(True, frozenset({"sm_100"}), frozenset()), "12.0") == "no"
    assert verdict(DeviceCode(True, frozenset({"sm_120a"}), frozenset()), "12.1") == "no"
    assert verdict(DeviceCode(True, frozenset(), frozenset({"compute_90"})), "12.0") == "runs"
    assert verdict(DeviceCode(True), "12.0") == "unknown"
    assert verdict(DeviceCode(False), "12.0") == "no"
    both = DeviceCode(True, frozenset({"sm_90", "sm_120"}), frozenset())
    hopper = DeviceCode(True, frozenset({"sm_90"}), frozenset())
    assert coverage_lost(both, hopper, ["12.0"]) == ["12.0"]
    assert coverage_lost(both, hopper, ["9.0"]) == []
    assert arches_dropped(both, hopper, ["9.0"]) == ["sm_120"]
    assert arches_dropped(both, hopper, ["12.0"]) == []  # used here: that is coverage lost instead
    assert coverage_lost(DeviceCode(True), DeviceCode(False), []) == ["any GPU"]


# ---------------------------------------------------------------- git revisions


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A fleet repository: ct200's lock committed, with its manifest."""
    root = tmp_path / "fleet"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    base_pkgs = [pkg("numpy", "2.2.6"), pkg("safetensors", "0.5.3"), pkg("xgrammar", "0.1.10")]
    lock, manifest = with_manifest(make_lock("ct200", base_pkgs), rows_for(base_pkgs))
    write_lock_files(root / "locks", lock, manifest)
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "ct200 lock")
    return root


def _change_head(root: Path) -> None:
    head_pkgs = [
        pkg("numpy", "2.2.6"),
        pkg("safetensors", "0.5.3", label="rebuilt"),
        pkg("xgrammar", "0.1.32"),
    ]
    changed = {"site-packages/safetensors/m1.py": "other bytes"}
    lock, manifest = with_manifest(make_lock("ct200", head_pkgs), rows_for(head_pkgs, changed))
    write_lock_files(root / "locks", lock, manifest)


def test_review_working_tree_against_base_through_cli(repo: Path) -> None:
    _change_head(repo)
    proc = run_envlock(repo, "review", "--base", "main", "--format", "json", "--no-index")
    assert proc.returncode == 1, proc.stderr
    envelope = json.loads(proc.stdout)
    assert (envelope["schema_version"], envelope["command"], envelope["ok"]) == (2, "review", False)
    data = envelope["result"]
    assert data["base"].startswith("main (") and data["head"] == "working tree"
    assert data["summary"]["block"] == 1 and data["summary"]["failed"] is True
    by_name = {c["package"]: c for c in data["changes"]}
    assert by_name["safetensors"]["kind"] == "artifact"
    assert by_name["safetensors"]["findings"][0]["code"] == "same-name-different-bytes"
    assert by_name["safetensors"]["files"] == [
        f".5.. site-packages/safetensors/m1.py ({by_name['safetensors']['files'][0].split('(')[1]}"
    ]
    assert by_name["xgrammar"] == {
        "lock": "locks/pylock.ct200.toml",
        "host": "ct200",
        "package": "xgrammar",
        "kind": "upgrade",
        "from": "0.1.10",
        "to": "0.1.32",
        "findings": [{"code": "upgrade", "severity": "info", "detail": "0.1.10 -> 0.1.32"}],
        "files": by_name["xgrammar"]["files"],
    }
    assert "numpy" not in by_name
    # --fail-on never: the same findings, exit 0.
    assert run_envlock(repo, "review", "--base", "main", "--fail-on", "never", "--no-index").returncode == 0


def test_review_between_two_revisions_and_new_lock(repo: Path) -> None:
    _change_head(repo)
    write_lock_files(repo / "locks", make_lock("ct300", [pkg("six", "1.17.0")]))
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "upgrade")
    (repo / "locks" / "pylock.ct200.toml").unlink()  # a working-tree change that --head must ignore
    proc = run_envlock(
        repo, "review", "--base", "HEAD~1", "--head", "HEAD", "--format", "markdown", "--no-index"
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith(MARKER + "\n**envlock review: 1 blocking")
    assert "locks/pylock.ct300.toml (ct300, added)" in proc.stdout
    assert "2 locks changed, 3 → 4 packages" in proc.stdout
    working = run_envlock(repo, "review", "--base", "HEAD", "--format", "json", "--no-index")
    data = json.loads(working.stdout)["result"]
    assert [(lock["path"], lock["status"]) for lock in data["locks"]] == [
        ("locks/pylock.ct200.toml", "removed")
    ]
    assert working.returncode == 0  # removals are info


def test_review_could_not_run(repo: Path, tmp_path: Path) -> None:
    proc = run_envlock(repo, "review", "--base", "no-such-branch")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "envlock: error: unknown git revision 'no-such-branch'"
    (repo / "locks" / "pylock.ct200.toml").write_text("lock-version = [\n")
    proc = run_envlock(repo, "review", "--base", "main", "--no-index")
    assert proc.returncode == 2
    assert proc.stderr.startswith("envlock: error: working tree:locks/pylock.ct200.toml: not valid TOML")
    plain = tmp_path / "plain"
    plain.mkdir()
    proc = run_envlock(plain, "review", "--base", "main")
    assert proc.returncode == 2 and "not inside a git work tree" in proc.stderr


def test_review_with_no_lock_changes_exits_zero(repo: Path) -> None:
    proc = run_envlock(repo, "review", "--base", "main")
    assert proc.returncode == 0
    assert "no lock files changed" in proc.stdout


def test_git_setup_and_textconv_make_git_diff_read_per_package(repo: Path) -> None:
    attributes = "locks/*.toml diff=envlock\nlocks/*.files.tsv diff=envlock\n"
    (repo / ".gitignore").write_text("*.pyc")  # the user's own line, no final newline
    proc = run_envlock(repo, "git-setup")
    assert proc.returncode == 0, proc.stderr
    assert (repo / ".gitattributes").read_text() == attributes
    assert (repo / ".gitignore").read_text() == "*.pyc\n/store/\n*.envlock/\n"
    assert run_envlock(repo, "git-setup").returncode == 0  # idempotent
    assert (repo / ".gitattributes").read_text() == attributes
    assert (repo / ".gitignore").read_text() == "*.pyc\n/store/\n*.envlock/\n"
    _change_head(repo)
    diff = _git(repo, "diff", "--", "locks/pylock.ct200.toml")
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert len([line for line in changed if line.startswith("-")]) == 3  # two packages + the digest line
    assert any(
        line.startswith("-xgrammar==0.1.10  index  xgrammar-0.1.10-py3-none-any.whl") for line in changed
    )
    assert any(
        line.startswith("+safetensors==0.5.3  index  safetensors-0.5.3-py3-none-any.whl") for line in changed
    )
    assert not any(line.startswith(("-numpy", "+numpy")) for line in changed)


def test_git_setup_keeps_store_out_and_diffs_manifests_per_package(repo: Path) -> None:
    assert run_envlock(repo, "git-setup").returncode == 0
    wheel = repo / "store" / "wheels" / ("ab" * 32) / "numpy-2.2.6-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"wheel bytes")
    state = repo / "venv.envlock" / "journal.json"
    state.parent.mkdir()
    state.write_text("{}")
    _git(repo, "add", "-A")
    staged = _git(repo, "diff", "--cached", "--name-only").split()
    assert sorted(staged) == [".gitattributes", ".gitignore"]
    _git(repo, "commit", "-q", "-m", "git-setup")
    _change_head(repo)
    diff = _git(repo, "diff", "--", "locks/pylock.ct200.files.tsv")
    # textconv's view: an owner line per package, its files indented below it
    assert " safetensors (3 files, 303 B)" in diff.splitlines(), diff
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert any(line.startswith("+    site-packages/safetensors/m1.py  f  101  ") for line in changed), diff
    assert not any("\t" in line for line in changed)  # not the raw TSV rows


def test_textconv_never_fails(tmp_path: Path) -> None:
    bad = tmp_path / "pylock.x.toml"
    bad.write_text("not = [toml\n")
    proc = run_envlock(tmp_path, "show", "--textconv", str(bad))
    assert proc.returncode == 0
    assert proc.stdout.startswith("# envlock show --textconv: ") and proc.stdout.endswith("not = [toml\n")


# ---------------------------------------------------------------- properties

_names = st.sampled_from(["alpha", "beta", "gamma", "delta", "torch", "nvidia-cudnn"])
_libs = st.sampled_from(["libfoo.so.1", "libbar.so.2", "libcudart.so.12", "libcudart.so.13", "libc.so.6"])


@st.composite
def packages(draw: st.DrawFn) -> list[Package]:
    chosen = draw(st.lists(_names, unique=True, max_size=6))
    out = []
    for name in chosen:
        native = []
        for j in range(draw(st.integers(0, 2))):
            needed = draw(st.lists(_libs, unique=True, max_size=3))
            soname = draw(st.one_of(st.none(), _libs))
            native.append(
                lib(
                    f"site-packages/{name.replace('-', '_')}/lib{j}.so",
                    soname=soname,
                    needed=needed,
                    glibc=draw(st.sampled_from(["2.17", "2.34", "2.39"])),
                    cuda=draw(st.booleans()),
                )
            )
        out.append(
            pkg(
                name,
                draw(st.sampled_from(["1.0", "1.1", "2.0+cu126", "2.0+cu128"])),
                source=draw(st.sampled_from(["index", "repacked"])),
                native=native,
                label=draw(st.sampled_from(["", "x"])),
            )
        )
    return out


@st.composite
def locks(draw: st.DrawFn) -> Lock:
    return make_lock(
        "ct200",
        draw(packages()),
        glibc=draw(st.sampled_from(["2.31", "2.35"])),
        cc=draw(st.sampled_from([(), ("12.0",)])),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(locks())
def test_a_lock_reviewed_against_itself_finds_nothing(lock: Lock) -> None:
    data = render_lock(lock)
    versions = LockVersions("locks/pylock.ct200.toml", data, data)
    review = review_versions([versions], "base", "head", ReviewOptions(check_yanked=False))
    (result,) = review.locks
    assert result.changes == () and result.findings == ()
    assert review.worst() == 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(locks(), locks())
def test_partial_parse_gives_the_same_review_as_whole_locks(base: Lock, head: Lock) -> None:
    """lockpair parses only differing blocks; the result must equal a review of both locks parsed whole."""
    from envlock.changes import diff_locks
    from envlock.lockpair import pair_from_texts

    pair = pair_from_texts(render_lock(base).decode(), "a", render_lock(head).decode(), "b")
    assert pair.names_a == {p.name for p in base.packages}
    whole = diff_locks(base, head, "a", "b")
    from envlock.changes import diff_pair

    partial = diff_pair(pair, "a", "b")
    assert partial.changes == whole.changes
    assert partial.load_only_a == whole.load_only_a and partial.load_only_b == whole.load_only_b
    assert partial.environment == whole.environment
    assert partial.unchanged == whole.unchanged
