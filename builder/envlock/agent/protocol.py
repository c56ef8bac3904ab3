"""Every message the controller and the agent exchange, as typed dictionaries.

One definition for both sides: the agent annotates what it emits with these,
the controller reads and builds them typed, so ``mypy --strict`` catches a
key renamed on one side only; ``tests/test_protocol.py`` runs the real agent
and checks each answer's keys against these annotations at run time.

Transport: one JSON object per stdout line (``snapshot`` sends two:
:class:`VenvDescription`, then :class:`Inventory`); on stderr, ``@progress``
(:class:`ProgressEvent`), ``@stats`` (:class:`HashStats`) and, when the agent
stops, ``@error`` (:class:`ErrorMessage`) lines. Answers that open a
conversation (the snapshot, ``ping``, ``applied``, ``apply-status``, ``apply``)
carry ``protocol``; the controller refuses another version than its own.

Spelled for Python 3.8 (the agent runs there): ``typing.Dict`` and friends,
no ``from __future__ import annotations`` (the controller's test resolves
these annotations at run time), optional keys in a ``total=False`` subclass.
JSON arrays arrive as lists; rows declared as tuples here are unpacked, never
compared with tuples.
"""

from typing import Any, Dict, List, Optional, Tuple, TypedDict

# Raise on every change to a message below that an older agent or controller
# would misread; the bundle a host runs is checked against it.
AGENT_PROTOCOL = 2

# ------------------------------------------------------------------ host facts


class InterpreterFacts(TypedDict):
    implementation: str
    version: str
    version_info: List[int]
    releaselevel: str
    cache_tag: Optional[str]
    soabi: Optional[str]
    ext_suffix: Optional[str]
    abiflags: str
    py_gil_disabled: bool
    pointer_bits: int
    executable: str
    executable_realpath: str
    base_prefix: str


class PlatformFacts(TypedDict):
    system: str
    machine: str
    libc: Optional[str]
    libc_version: Optional[str]
    kernel: str
    hostname: str
    cpu_count: int


class GpuFacts(TypedDict):
    """One GPU as ``nvidia-smi`` reports it."""

    name: str
    cc: str
    driver: str


class PipConfig(TypedDict):
    """The index URLs the host's pip would use, and the files or variables that said so."""

    urls: List[str]
    find_links: List[str]
    sources: List[str]


# ------------------------------------------------------------------ snapshot

# [path relative to site-packages, "sha256=..." or "", size or None]
RecordRow = Tuple[str, str, Optional[int]]
# [path relative to the venv, sha256 hex, size, executable]
FileRow = Tuple[str, str, int, bool]
# [path relative to the venv, link target]
LinkRow = Tuple[str, str]
# [path of a damaged .pyc, why]
BytecodeRow = Tuple[str, str]
# [name, version]
NameVersion = Tuple[str, str]


class WheelFacts(TypedDict):
    """A dist-info's WHEEL file (all empty when there is none)."""

    tags: List[str]
    generator: Optional[str]
    root_is_purelib: Optional[bool]
    build: Optional[str]


class DistFacts(TypedDict):
    """One installed distribution, read from its ``*.dist-info`` files."""

    name: str
    version: str
    requires_dist: List[str]
    requires_python: Optional[str]
    dist_info: str
    wheel: WheelFacts
    installer: Optional[str]
    requested: bool
    direct_url: Optional[Dict[str, Any]]
    top_level: Optional[List[str]]
    console_scripts: List[str]
    record: List[RecordRow]
    record_sha256: str


class VenvDescription(TypedDict):
    """The snapshot's first line: cheap facts, sent before any file is hashed."""

    protocol: int
    venv: str
    site: str
    interpreter: InterpreterFacts
    platform: PlatformFacts
    pyvenv_cfg: Dict[str, str]
    pip_config: PipConfig
    gpu: Optional[List[GpuFacts]]
    dists: List[DistFacts]
    egg_infos: List[str]


class _InventoryRequired(TypedDict):
    files: List[FileRow]
    links: List[LinkRow]
    # ELF facts per library (``envlock.binary.elf.read_elf_facts``, or {"error": ...})
    native: Dict[str, Dict[str, Any]]
    # bin/ scripts hashed with their shebang as ``#!python``: [sha256, size]
    bin_normalized: Dict[str, Tuple[str, int]]
    # exact bytes (base64) of every bin/ file that is not venv scaffold
    bin_files: Dict[str, str]


class Inventory(_InventoryRequired, total=False):
    """The snapshot's second line: every file hashed, every library read."""

    bytecode: List[BytecodeRow]  # with ``snapshot --bytecode`` only
    # Where the host's loader finds each DT_NEEDED name no library of the venv
    # provides (None: not found); read by review (docs/lock-format.md).
    host_libraries: Dict[str, Optional[str]]
    # ABI facts (``envlock.agent.abi``): per library, the symbols it binds from
    # each library of another distribution, ``name@VERSION`` when versioned.
    abi: Dict[str, Dict[str, List[str]]]


class HashStats(TypedDict):
    """The ``@stats`` line after an inventory (stderr: stdout depends on content alone)."""

    hashed: int
    cached: int
    bytes_hashed: int


# ------------------------------------------------------------------ ping, have, receive


class PingAnswer(TypedDict):
    protocol: int
    interpreter: InterpreterFacts
    platform: PlatformFacts
    gpu: Optional[List[GpuFacts]]


class HaveAnswer(TypedDict):
    present: List[str]  # "sha256/name" entries already in the drop


class ReceivedArtifact(TypedDict):
    sha256: str
    name: str
    size: int


class ReceiveAnswer(TypedDict):
    received: List[ReceivedArtifact]


class PullItem(TypedDict):
    """One artifact the host should fetch itself (``pull``), from the first URL that works."""

    sha256: str
    name: str  # its name in the drop: DIR/<sha256>/<name>
    size: Optional[int]  # None when the lock does not say
    urls: List[str]  # http(s):// or file://, tried in order


class PulledArtifact(TypedDict):
    sha256: str
    name: str
    size: int
    url: str  # where it came from
    resumed_from: int  # bytes an earlier, cut-off download had left (0: from the start)


class PullFailure(TypedDict):
    sha256: str
    name: str
    error: str  # every URL tried and why it failed


class PullAnswer(TypedDict):
    pulled: List[PulledArtifact]  # fetched now (those already in the drop are in neither list)
    failed: List[PullFailure]  # the controller pushes these


# ------------------------------------------------------------------ apply: the plan


class PlanWheel(TypedDict):
    name: str
    sha256: str
    path: str  # on the host, under the artifact drop


class PlanSource(TypedDict):
    path: str  # where the editable install's .pth points
    archive: str  # its source tree, a tar.gz in the artifact drop


class PlanBinFile(TypedDict):
    path: str  # the exact bytes, in the artifact drop
    executable: bool


class PlanDist(TypedDict):
    """Bookkeeping as the lock records it, so a capture of the result reads the lock back."""

    name: str
    version: str
    installer: Optional[str]
    requested: bool
    direct_url: Optional[Dict[str, Any]]


# [lock path (site-packages/... or venv-relative), sha256 or link target, size, kind f|x|l]
ExpectedRow = Tuple[str, str, int, str]


class _ApplyPlanRequired(TypedDict):
    venv: str
    digest: str
    python_version: str
    base_python: str
    creator: str  # "uv" or "venv"
    pyvenv_cfg: Optional[str]
    prompt: Optional[str]
    keep_uv_lock: bool
    dists: List[PlanDist]
    uv: str
    wheels: List[PlanWheel]
    bin_files: Dict[str, PlanBinFile]
    sources: List[PlanSource]
    source_venv: str
    expected: List[ExpectedRow]
    smoke_modules: List[str]
    smoke_checks: List[str]
    smoke_skip_missing: List[str]
    allow_smoke_failures: bool
    force: bool
    keep_staging: bool


class ApplyPlan(_ApplyPlanRequired, total=False):
    """What ``apply`` reads on stdin: everything the host needs to build the lock's venv."""

    smoke_timeout: float


# ------------------------------------------------------------------ apply: the answers


class RunningPython(TypedDict):
    """The interpreter an agent command ran in: ``sys.executable`` and its version."""

    executable: str
    version: str  # "3.12.1"


class _AppliedRequired(TypedDict):
    protocol: int
    refused: Optional[str]
    exists: bool
    matches: bool
    dists: Optional[List[NameVersion]]
    # The interpreter that answered, so that the controller can vouch for it as the
    # lock's base interpreter without a search of its own first.
    python: RunningPython


class AppliedAnswer(_AppliedRequired, total=False):
    """``applied``: may apply replace the venv, and is it already the lock (a no-op)?

    The optional keys are left out when the path itself is refused.
    """

    managed: bool
    foreign: bool
    stamp_digest: Optional[str]
    bytecode: List[BytecodeRow]


class ApplyStatus(TypedDict):
    """``apply-status``: where the last apply stands, for a controller whose session was cut."""

    protocol: int
    running: Optional[str]
    step: Optional[str]
    swapped: Optional[bool]
    stamp_digest: Optional[str]


class SmokeReport(TypedDict):
    """``smoke`` (and a failed apply's smoke): every import or check and how it ended."""

    venv: str
    site: str
    python: str
    jobs: int
    timeout: float
    seconds: float
    retries: int
    stopped: bool
    dists: List[Dict[str, Any]]
    warnings: List[str]
    checks: int
    results: List[Dict[str, Any]]
    not_run: List[str]


class SmokeSummary(TypedDict):
    """A successful apply's smoke, counted."""

    ok: int
    skipped: int
    failed: List[Dict[str, Any]]
    seconds: float


class RestoredSource(TypedDict):
    path: str
    action: str  # "kept" or "restored"


class _ApplyAnswerRequired(TypedDict):
    protocol: int
    venv: str


class ApplyAnswer(_ApplyAnswerRequired, total=False):
    """``apply``'s answer, in one of three shapes.

    Swapped in: timings ... seconds, and how the wheels' files were put in place
    (``link_mode``: "clone", copy-on-write reflinks, or "copy"; ``link_note``:
    why not clone). An interrupted apply of this very lock
    found already past its swap: previous, recovered, finished. Imports
    failed, nothing swapped: failed ("smoke"), kept, smoke_report.
    """

    timings: Dict[str, float]
    previous: Optional[str]
    recovered: Optional[str]
    installed: int
    link_mode: str
    link_note: Optional[str]
    bin_files: int
    sources: List[RestoredSource]
    verified_files: int
    smoke: SmokeSummary
    seconds: float
    finished: bool
    failed: str
    kept: Optional[str]
    smoke_report: SmokeReport


class _RollbackRequired(TypedDict):
    venv: str
    restored_from: str


class RolledSlot(TypedDict):
    """Which lock a venv was applied from, and when (``slots.json``)."""

    digest: str
    at: Optional[str]


class RollbackAnswer(_RollbackRequired, total=False):
    recovered: Optional[str]
    restored: Optional[RolledSlot]  # the venv now live; None: a venv envlock has no lock for
    replaced: Optional[RolledSlot]  # the new rollback copy
    again: bool  # this rollback undid a rollback (--again)


# ------------------------------------------------------------------ stderr lines


class ProgressEvent(TypedDict):
    """One ``@progress`` line: ``done`` of ``total`` in ``phase`` (bytes for hash, items otherwise).

    Phases: hash, pull, stage, install, verify, smoke. ``detail`` says what is being
    done now: files hashed (``120/3400 files``), a step, the import just done.
    """

    phase: str
    done: int
    total: int
    detail: str


class ErrorMessage(TypedDict):
    """The ``@error`` line the agent writes before it exits 2.

    ``message`` is the one line a person reads; ``code`` says which kind of
    failure it is (one of ``ERROR_CODES``), ``details`` the facts a program
    may act on (a path, an errno).
    """

    code: str
    message: str
    details: Dict[str, Any]


ERROR_CODES = (
    "snapshot",  # the venv cannot be described (not a venv, unlistable, a non-UTF-8 name)
    "dist",  # a dist-info file is damaged
    "unreadable-file",  # a file of the venv cannot be read
    "receive",  # an artifact arrived damaged or truncated
    "source",  # an editable install's source tree cannot be packed or unpacked
    "apply",  # apply or rollback stopped (the message says where the venvs stand)
    "path",  # a path from a lock or plan is refused
    "journal",  # the apply journal is damaged
    "smoke",  # the smoke could not run at all
    "os",  # any other operating system error
    "value",  # any other bad value
)
