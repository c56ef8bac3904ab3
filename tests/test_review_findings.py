"""Review findings beyond the golden cases: exact details, lock-level findings and their order.

Expectations come from REVIEW.md and the findings table in
``review/findings.py``; each test says which rule it holds.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from envlock.changes import PackageChange, artifact_change
from envlock.lock.io import render_lock
from envlock.lock.model import HostLibraries, Lock
from envlock.review import LockVersions, ReviewOptions, review_versions
from envlock.review.findings import host_facts, package_findings
from envlock.review.model import Finding, LockReview
from envlock.review.yanked import YankedCheck
from helpers import build_simple_index, make_wheel
from lockfactory import lib, make_lock, pkg, rows_for, sha, with_manifest


def _review(
    base: Lock | None,
    head: Lock | None,
    manifests: tuple[bytes, bytes] | None = None,
) -> LockReview:
    versions = LockVersions(
        path="locks/pylock.ct200.toml",
        base=render_lock(base) if base is not None else None,
        head=render_lock(head) if head is not None else None,
        base_manifest=manifests[0] if manifests else None,
        head_manifest=manifests[1] if manifests else None,
    )
    (review,) = review_versions([versions], "base", "head", ReviewOptions(check_yanked=False)).locks
    return review


def _short(label: str) -> str:
    return sha(label)[:12]


def _findings(review: LockReview, package: str) -> list[Finding]:
    (change,) = [c for c in review.changes if c.package == package]
    return list(change.findings)


# ---------------------------------------------------------------- details a reviewer reads


def test_new_native_libraries_are_listed_four_then_counted() -> None:
    base = make_lock("ct200", [pkg("kern", "1.0")])
    five = [lib(f"site-packages/kern/_m{i}.so") for i in range(5)]
    head = make_lock("ct200", [pkg("kern", "1.1", native=five)])
    (new,) = [f for f in _findings(_review(base, head), "kern") if f.code == "new-native-library"]
    assert new == Finding(
        "new-native-library", "warn", "new native library: kern _m0, kern _m1, kern _m2, kern _m3 and 1 more"
    )
    head = make_lock("ct200", [pkg("kern", "1.1", native=five[:4])])
    (new,) = [f for f in _findings(_review(base, head), "kern") if f.code == "new-native-library"]
    assert new.detail == "new native library: kern _m0, kern _m1, kern _m2, kern _m3"


def test_gpu_code_lost_names_every_host_cc_and_any_gpu_without_one() -> None:
    kernel = "site-packages/fa/_C.so"
    before = [pkg("fa", "1.0", native=[lib(kernel, cuda=True)])]
    after = [pkg("fa", "1.1", native=[lib(kernel, label="cpu")])]
    review = _review(
        make_lock("ct200", before, cc=["9.0", "12.0"]), make_lock("ct200", after, cc=["9.0", "12.0"])
    )
    lost = [f for f in _findings(review, "fa") if f.code == "gpu-arch-lost"]
    assert lost == [Finding("gpu-arch-lost", "block", "fa _C: no GPU code left that runs on cc 12.0, cc 9.0")]
    review = _review(make_lock("ct200", before), make_lock("ct200", after))
    lost = [f for f in _findings(review, "fa") if f.code == "gpu-arch-lost"]
    assert lost == [Finding("gpu-arch-lost", "block", "fa _C: no GPU code left that runs on any GPU")]
    # The head lost its GPU facts: the base's host GPUs still count.
    review = _review(make_lock("ct200", before, cc=["9.0"]), make_lock("ct200", after))
    assert [f.detail for f in _findings(review, "fa") if f.code == "gpu-arch-lost"] == [
        "fa _C: no GPU code left that runs on cc 9.0"
    ]


def test_local_version_label_added_or_dropped_is_a_warning_with_both_sides() -> None:
    def codes(old: str, new: str) -> list[Finding]:
        change = PackageChange("torch", "upgrade", pkg("torch", old), pkg("torch", new))
        return [f for f in package_findings(change, (), None) if f.code == "local-version-label"]

    assert codes("2.8.0", "2.8.1+cu128") == [
        Finding(
            "local-version-label", "warn", "local version label +(none) -> +cu128: the build variant changed"
        )
    ]
    assert [f.detail for f in codes("2.8.0+cu126", "2.8.1")] == [
        "local version label +cu126 -> +(none): the build variant changed"
    ]
    assert codes("2.8.0+cu126", "2.8.1+cu126") == []
    assert codes("2.8.0", "2.8.1") == []


def test_same_version_other_wheel_is_an_info_artifact_change() -> None:
    before = pkg("cext", "2.0", filename="cext-2.0-cp311-cp311-manylinux_2_17_x86_64.whl")
    after = pkg("cext", "2.0", filename="cext-2.0-cp312-cp312-manylinux_2_17_x86_64.whl")
    found = package_findings(PackageChange("cext", "artifact", before, after), (), None)
    assert found == [
        Finding(
            "artifact",
            "info",
            "other wheel: cext-2.0-cp311-cp311-manylinux_2_17_x86_64.whl -> "
            "cext-2.0-cp312-cp312-manylinux_2_17_x86_64.whl",
        )
    ]
    assert found[0].detail == artifact_change(before, after)


def test_a_wheel_from_the_store_is_a_local_build_and_never_same_name_different_bytes() -> None:
    before = pkg("kern", "1.0")
    stored = replace(pkg("kern", "1.0", source="repacked", label="rebuilt"), source="store", reason=None)
    assert before.wheel.filename == stored.wheel.filename and before.wheel.sha256 != stored.wheel.sha256
    found = package_findings(PackageChange("kern", "artifact", before, stored), (), None)
    assert found == [
        Finding(
            "local-build", "warn", "locally built or modified package changed: repacked from the live files"
        )
    ]
    found = package_findings(PackageChange("kern", "artifact", stored, before), (), None)
    assert [f.code for f in found] == ["artifact"]


def test_yanked_is_asked_only_for_wheels_from_the_index(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "idna", "3.10", {"idna/__init__.py": b""})
    url = build_simple_index(tmp_path / "index", [wheel])
    page = tmp_path / "index" / "simple" / "idna" / "index.html"
    page.write_text(page.read_text().replace('">idna', '" data-yanked="bad">idna'))
    from_index = pkg("idna", "3.10", index=url)
    check = YankedCheck()
    change = PackageChange("idna", "upgrade", pkg("idna", "3.9", index=url), from_index)
    assert [f.code for f in package_findings(change, (), check) if f.severity == "warn"] == ["yanked"]
    rebuilt = replace(pkg("idna", "3.10", source="repacked"), index=url)
    change = PackageChange("idna", "upgrade", pkg("idna", "3.9", index=url), rebuilt)
    assert [f.code for f in package_findings(change, (), check) if f.code == "yanked"] == []


# ---------------------------------------------------------------- per-file detail


def test_per_file_detail_for_upgrades_downgrades_and_rebuilds_with_a_limit() -> None:
    base_pkgs = [pkg("many", "1.0", files=205), pkg("down", "2.0", files=2)]
    head_pkgs = [pkg("many", "1.1", files=3), pkg("down", "1.9", files=3)]
    base, base_m = with_manifest(make_lock("ct200", base_pkgs), rows_for(base_pkgs))
    head, head_m = with_manifest(make_lock("ct200", head_pkgs), rows_for(head_pkgs))
    review = _review(base, head, (base_m, head_m))
    files = {c.package: c.files for c in review.changes}
    assert files["down"][0].endswith(
        "site-packages/down/m0.py (" + _short("down 2.0 0") + " -> " + _short("down 1.9 0") + ")"
    )
    assert files["down"][1:] == (
        files["down"][1].split(" ", 1)[0]
        + " site-packages/down/m1.py ("
        + _short("down 2.0 1")
        + " -> "
        + _short("down 1.9 1")
        + ")",
        "added site-packages/down/m2.py",
    )
    assert len(files["many"]) == 201
    assert files["many"][-1] == "… and 5 more file(s)"
    assert "removed site-packages/many/m100.py" in files["many"]
    exactly = [pkg("many", "1.0", files=200)]
    base, base_m = with_manifest(make_lock("ct200", exactly), rows_for(exactly))
    head_pkgs = [pkg("many", "1.1", files=0)]
    head, head_m = with_manifest(make_lock("ct200", head_pkgs), rows_for(head_pkgs))
    (change,) = _review(base, head, (base_m, head_m)).changes
    assert len(change.files) == 200 and not change.files[-1].startswith("…")


# ---------------------------------------------------------------- the lock as a whole


def test_lock_added_or_removed_counts_packages_on_its_side_only() -> None:
    lock = make_lock("ct200", [pkg("six", "1.17.0"), pkg("idna", "3.10")], python="3.12.4")
    added = _review(None, lock)
    assert (added.status, added.packages_before, added.packages_after) == ("added", 0, 2)
    removed = _review(lock, None)
    assert (removed.status, removed.packages_before, removed.packages_after) == ("removed", 2, 0)
    assert removed.host == host_facts(lock) and removed.host.python == "3.12.4"


def test_host_facts_without_a_python_version_say_nothing() -> None:
    lock = make_lock("ct200", [pkg("six", "1.17.0")])
    empty = replace(lock, interpreter=replace(lock.interpreter, version=""))
    assert host_facts(empty).python == ""


def test_lock_findings_most_serious_first() -> None:
    """A library of an unchanged package stops loading (block), find-links changed (warn),
    the Python changed (info): listed block, warn, info whatever order they were found in."""
    ops = lib("site-packages/ops/_ops.so", needed=("libdep.so.1", "libc.so.6"))
    dep = lib("site-packages/dep/libdep.so.1", soname="libdep.so.1")
    base = make_lock("ct200", [pkg("ops", "1.0", native=[ops]), pkg("dep", "1.0", native=[dep])])
    missing = HostLibraries(missing=("libdep.so.1",))
    head = make_lock("ct200", [pkg("ops", "1.0", native=[ops])], python="3.11.10", host_libraries=missing)
    head = replace(head, find_links=("file:///wheels",))
    review = _review(base, head)
    assert [(f.code, f.severity) for f in review.findings] == [
        ("native-unloadable", "block"),
        ("index-changed", "warn"),
        ("environment", "info"),
    ]
    assert review.findings[0].package == "ops"
    assert review.findings[0].detail.endswith(" (the package itself did not change)")


def test_a_changed_package_that_stops_loading_shows_that_first() -> None:
    ops = lib("site-packages/ops/_ops.so", needed=("libdep.so.1", "libc.so.6"), cuda=True)
    dep = lib("site-packages/dep/libdep.so.1", soname="libdep.so.1")
    base = make_lock("ct200", [pkg("ops", "1.0", native=[ops]), pkg("dep", "1.0", native=[dep])], cc=["9.0"])
    cpu_ops = lib("site-packages/ops/_ops.so", needed=("libdep.so.1", "libc.so.6"), label="cpu")
    missing = HostLibraries(missing=("libdep.so.1",))
    head = make_lock("ct200", [pkg("ops", "1.1", native=[cpu_ops])], cc=["9.0"], host_libraries=missing)
    codes = [f.code for f in _findings(_review(base, head), "ops")]
    assert codes[:2] == ["native-unloadable", "gpu-arch-lost"]
    assert not _findings(_review(base, head), "ops")[0].detail.endswith("did not change)")


def test_a_library_no_package_ships_is_rated_by_the_host_facts() -> None:
    """BLOCK only when the host's loader does not find it; INFO when it does; WARN without facts."""
    yaml_ext = lib("site-packages/yaml/_yaml.so", needed=("libyaml-0.so.2", "libc.so.6"))
    base = make_lock("ct200", [pkg("six", "1.17.0")])
    head_pkgs = [pkg("six", "1.17.0"), pkg("pyyaml", "6.0.2", native=[yaml_ext])]
    codes = ("native-unloadable", "host-library", "host-library-unknown")
    rated = {}
    for state, facts in (
        ("present", HostLibraries(found={"libyaml-0.so.2": "/usr/lib/x86_64-linux-gnu/libyaml-0.so.2"})),
        ("missing", HostLibraries(missing=("libyaml-0.so.2",))),
        ("unknown", None),
    ):
        head = make_lock("ct200", head_pkgs, host_libraries=facts)
        (rated[state],) = [
            (f.code, f.severity) for f in _findings(_review(base, head), "pyyaml") if f.code in codes
        ]
    assert rated == {
        "present": ("host-library", "info"),
        "missing": ("native-unloadable", "block"),
        "unknown": ("host-library-unknown", "warn"),
    }
