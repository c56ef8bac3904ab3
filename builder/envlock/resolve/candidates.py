"""Candidate artifacts for each package, and whether each runs on the target.

Candidates: the reference lock's artifact, and every wheel the indexes list
(PEP 691/503, several indexes at once). A candidate fits the target when its
tags are among the target's, its Requires-Python admits the target's Python,
and its native code runs there: every library has an image for the target's
GPU (SASS or PTX the driver can JIT) and nothing needs a newer driver. The
native verdict comes from ``envlock.inspect`` on the wheel and is cached in
the store by sha256, GPU and driver, so each wheel is inspected once.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from envlock.buildrecord import read_record
from envlock.fetch import ArtifactError, fetch_one
from envlock.index import IndexClient, IndexFile
from envlock.lock.model import Artifact, Lock, Package, Source
from envlock.resolve.target import TargetEnv
from envlock.store import Store
from envlock.tmpname import private_sibling


@dataclass(frozen=True)
class Candidate:
    name: str
    version: Version
    filename: str
    sha256: str | None
    url: str | None
    index: str | None
    reference: Package | None = None  # set when this is the reference's own artifact
    requires_python: str | None = None
    in_store: bool = False  # a wheel placed in the artifact store rather than listed by an index
    built: bool = False  # a store wheel `envlock build` made (it has a build record)

    @property
    def source(self) -> Source:
        if self.reference is not None:
            return self.reference.source
        if self.built:
            return "built"
        return "store" if self.in_store else "index"

    @property
    def key(self) -> str:
        return self.sha256 or self.url or self.filename

    @property
    def tags(self) -> frozenset[Tag]:
        return frozenset(parse_wheel_filename(self.filename)[3])

    def artifact(self, size: int | None = None) -> Artifact:
        if self.reference is not None:
            return self.reference.wheel
        assert self.sha256 is not None
        return Artifact(filename=self.filename, sha256=self.sha256, size=size, url=self.url)


@dataclass
class Finder:
    env: TargetEnv
    reference: Lock
    lock_dir: Path
    client: IndexClient
    store: Store
    rejected: dict[str, list[tuple[Candidate, str]]] = field(default_factory=dict)
    _listing: dict[str, list[Candidate]] = field(default_factory=dict)
    _verdict: dict[str, str | None] = field(default_factory=dict)
    _tags: frozenset[Tag] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        self._tags = frozenset(self.env.tags())

    def reference_candidate(self, name: str) -> Candidate | None:
        ref = self.reference.package(canonicalize_name(name))
        if ref is None:
            return None
        return Candidate(
            ref.name, Version(ref.version), ref.wheel.filename, ref.wheel.sha256, ref.wheel.url,
            ref.index, ref, ref.requires_python,
        )  # fmt: skip

    def candidates(self, name: str) -> list[Candidate]:
        """Every artifact known for ``name``, fitting or not (reference first).

        Asks the indexes, so the provider calls it only when the reference's
        own artifact does not do: a target that keeps the reference's bytes
        costs no index traffic at all.
        """
        name = canonicalize_name(name)
        if name in self._listing:
            return self._listing[name]
        found: list[Candidate] = []
        ref = self.reference_candidate(name)
        if ref is not None:
            found.append(ref)
        seen = {c.filename for c in found}
        for file in self.client.files(name):
            if not file.filename.endswith(".whl") or file.filename in seen:
                continue
            try:
                _n, version, _b, _t = parse_wheel_filename(file.filename)
            except InvalidWheelFilename:
                continue
            seen.add(file.filename)
            found.append(_from_index(name, version, file))
        # Store wheels after the indexes: a copy of an index wheel (fetched for
        # inspection) is that index wheel; only other bytes are a new candidate.
        known = {c.sha256 for c in found}
        for path in self._store_wheels(name):
            if path.parent.name not in known:
                version = parse_wheel_filename(path.name)[1]
                built = read_record(self.store, path.parent.name) is not None
                found.append(
                    Candidate(
                        name, version, path.name, path.parent.name, None, None, in_store=True, built=built
                    )
                )
        self._listing[name] = found
        return found

    def _store_wheels(self, name: str) -> list[Path]:
        """Wheels of ``name`` in the store (``wheels/<sha256>/<file name>``): built for
        a target's GPU (``envlock build``, with a record in ``builds/``), or captured
        from another host."""
        prefix = name.replace("-", "_")
        found = []
        for path in sorted((self.store.root / "wheels").glob("*/*.whl")):
            if not path.name.lower().startswith(prefix + "-"):
                continue
            try:
                if parse_wheel_filename(path.name)[0] == name:
                    found.append(path)
            except InvalidWheelFilename:
                continue
        return found

    @property
    def asked_an_index(self) -> bool:
        return bool(self._listing)

    def problem(self, cand: Candidate) -> str | None:
        """Why ``cand`` cannot run on the target, or None when it can."""
        if cand.key in self._verdict:
            return self._verdict[cand.key]
        why = self._check(cand)
        self._verdict[cand.key] = why
        if why is not None:
            self.rejected.setdefault(cand.name, []).append((cand, why))
        return why

    def _check(self, cand: Candidate) -> str | None:
        if not (cand.tags & self._tags):
            tags = sorted(str(t) for t in cand.tags)
            shown = tags[0] + (f" (+{len(tags) - 1} more)" if len(tags) > 1 else "")
            env = self.env
            where = f"{env.implementation} {env.python} on {env.machine} glibc {env.libc_version}"
            return f"its tags ({shown}) do not fit {where}"
        if cand.requires_python:
            try:
                if not SpecifierSet(cand.requires_python).contains(self.env.python, prereleases=True):
                    has = self.env.python
                    return f"it requires Python {cand.requires_python}, the target has {has}"
            except InvalidSpecifier:
                pass
        if all(t.platform == "any" for t in cand.tags):
            return None
        return self._native_problem(cand)

    def local_path(self, cand: Candidate) -> Path:
        """The wheel in the store (fetched and sha256-checked on first use)."""
        if cand.reference is not None:
            return fetch_one(self.store, self.lock_dir, cand.reference).path
        if cand.sha256 is None:
            raise ArtifactError(f"{cand.filename}: the index gives no sha256; envlock will not lock it blind")
        pkg = Package(name=cand.name, version=str(cand.version), wheel=cand.artifact(), source="index")
        return fetch_one(self.store, self.lock_dir, pkg).path

    def _native_problem(self, cand: Candidate) -> str | None:
        if not self.env.gpu_cc:
            return None
        path = self.local_path(cand)
        sha = cand.sha256 or _sha(path)
        facts_dir = self.store.root / "facts"
        problems: list[str] = []
        for cc in self.env.gpu_cc:
            key = f"{sha}-{cc}-{self.env.driver or 'any'}"
            cache = facts_dir / f"{key}.json"
            if cache.is_file():
                problem = json.loads(cache.read_text()).get("problem")
            else:
                problem = _inspect_problem(path, cc, self.env.driver)
                facts_dir.mkdir(parents=True, exist_ok=True)
                tmp = private_sibling(cache)
                tmp.write_text(json.dumps({"problem": problem}))
                os.replace(tmp, cache)
            if problem:
                problems.append(problem)
        return "; ".join(problems) or None

    def metadata(self, cand: Candidate) -> tuple[tuple[str, ...], str | None]:
        """Requires-Dist and Requires-Python of a candidate."""
        if cand.reference is not None:
            return cand.reference.requires_dist, cand.reference.requires_python
        with zipfile.ZipFile(self.local_path(cand)) as archive:
            name = next(
                n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
            )
            message = HeaderParser().parsestr(archive.read(name).decode("utf-8"))
        requires = tuple(v.strip() for v in message.get_all("Requires-Dist") or [])
        return requires, (message.get("Requires-Python") or "").strip() or None


def _from_index(name: str, version: Version, file: IndexFile) -> Candidate:
    return Candidate(
        name, version, file.filename, file.sha256, file.url, file.source, requires_python=file.requires_python
    )


def _sha(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _inspect_problem(path: Path, cc: str, driver: str | None) -> str | None:
    from envlock.binary.cuda import NO_IMAGE, WONT_LOAD
    from envlock.inspect import inspect_path

    result = inspect_path(path, gpu=cc, driver=driver)
    sm = "sm_" + cc.replace(".", "")
    for lib in result.libraries:
        if lib.optional:
            continue
        if lib.verdict == NO_IMAGE:
            return f"{lib.path}: no image for {sm} ({lib.reason})"
        if lib.verdict == WONT_LOAD and "driver" in lib.reason:
            return f"{lib.path}: {lib.reason}"
    return None
