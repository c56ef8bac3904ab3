"""Host profiles: ``hosts/<name>.toml``.

A profile says where a host's venv lives, how to reach the host, and the facts
that cannot be probed from files (GPU, driver, smoke checks). Validation
collects every problem and names the file and the field, like
``hosts/ct200.toml: gpu.cc[0]: expected a string like "12.0"``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envlock import tomlmemo
from envlock.errors import ProfileError
from envlock.workspace import Workspace

PullMode = Literal["auto", "always", "never"]
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# hosts/groups.toml holds the host groups (envlock.groups), so no host is called "groups"
GROUPS_FILE = "groups.toml"
_CC = re.compile(r"^\d+\.\d+$")
_DRIVER = re.compile(r"^\d+(\.\d+){1,2}$")


@dataclass(frozen=True, slots=True)
class GpuFacts:
    cc: tuple[str, ...]
    driver: str | None


@dataclass(frozen=True, slots=True)
class IndexConfig:
    urls: tuple[str, ...]
    find_links: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TargetFacts:
    """A host's interpreter and platform, stated in the profile (no probe needed)."""

    python: str  # "3.12.1"
    implementation: str = "cpython"
    glibc: str | None = None
    machine: str = "x86_64"


@dataclass(frozen=True, slots=True)
class LockPolicy:
    """Per-host resolver inputs: extra pins and dependency overrides (PEP 508 strings)."""

    pins: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HostProfile:
    name: str
    path: Path
    venv: str
    python: str | None = None  # base interpreter for building venvs (default: the lock's pyvenv home)
    ssh: str | None = None
    ssh_args: tuple[str, ...] = ()
    allow_ssh_commands: bool = False
    # Seconds an SSH master connection outlives the run that opened it (None: the default;
    # 0: one connection per run, closed at its end). See envlock.transport.sshcontrol.
    ssh_persist: int | None = None
    reference: str | None = None
    gpu: GpuFacts | None = None
    index: IndexConfig | None = None
    smoke_checks: tuple[str, ...] = field(default=())
    # fnmatch patterns of module names whose smoke failures are expected (never gate)
    smoke_exclude: tuple[str, ...] = field(default=())
    target: TargetFacts | None = None
    policy: LockPolicy = field(default_factory=LockPolicy)
    # Does the host fetch artifacts itself (shared store, indexes)? auto: try, and push what it
    # could not fetch; always: a failed fetch is an error; never: push everything (docs/store.md).
    pull: PullMode = "auto"

    @property
    def is_local(self) -> bool:
        return self.ssh is None


_TOP_KEYS = {"venv", "python", "ssh", "ssh_args", "allow_ssh_commands", "ssh_persist", "reference", "gpu",
             "index", "smoke", "target", "lock", "pull"}  # fmt: skip
# ssh_config keywords that make ssh run a command on the controller. A profile
# is data that other people commit; these need `allow_ssh_commands = true`.
SSH_COMMAND_KEYWORDS = {"proxycommand", "localcommand", "permitlocalcommand", "knownhostscommand", "match"}
# OpenSSH's getopt string: letters that take an argument, and those that do not.
_SSH_FLAGS_WITH_ARG = set("BbcDEeFIiJLlmOoPpQRSWw")
_SSH_FLAGS = set("46AaCfGgKkMNnqsTtVvXxYy")
_EXEC = re.compile(r"(^|\s)!?exec(\s|=|$)", re.IGNORECASE)
_KEYWORD = re.compile(r'^\s*"?([A-Za-z]+)"?\s*(?:=|\s|$)')
_TARGET_KEYS = {"python", "implementation", "glibc", "machine"}
_LOCK_KEYS = {"pins", "overrides"}
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
_GPU_KEYS = {"cc", "driver"}
_INDEX_KEYS = {"urls", "find_links"}
_SMOKE_KEYS = {"checks", "exclude"}
# A module name pattern: dotted identifiers with fnmatch's * ? [] (no path, no spaces).
_MODULE_PATTERN = re.compile(r"^[A-Za-z0-9_.*?\[\]!-]+$")
_DURATION = re.compile(r"^(\d+)(s|m|h)?$")
_DURATION_UNITS = {None: 1, "s": 1, "m": 60, "h": 3600}
MAX_SSH_PERSIST = 24 * 3600  # a master kept longer than a day is a forgotten one


def parse_duration(value: object) -> int | None:
    """Seconds from ``60``, ``"60"``, ``"60s"``, ``"5m"`` or ``"1h"``; None when it is none of these."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_SSH_PERSIST else None
    if not isinstance(value, str):
        return None
    match = _DURATION.match(value.strip())
    if match is None:
        return None
    seconds = int(match.group(1)) * _DURATION_UNITS[match.group(2)]
    return seconds if seconds <= MAX_SSH_PERSIST else None


class _Collector:
    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def unknown_keys(self, table: Mapping[str, Any], allowed: set[str], prefix: str) -> None:
        for key in sorted(set(table) - allowed):
            self.add(f"{prefix}{key}", f"unknown field (known: {', '.join(sorted(allowed))})")

    def string(self, table: Mapping[str, Any], key: str, prefix: str = "") -> str | None:
        value = table.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            self.add(prefix + key, f"expected a non-empty string, got {value!r}")
            return None
        return value

    def strings(self, table: Mapping[str, Any], key: str, prefix: str = "") -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list):
            self.add(prefix + key, f"expected a list of strings, got {value!r}")
            return ()
        good: list[str] = []
        for i, item in enumerate(value):
            if isinstance(item, str) and item:
                good.append(item)
            else:
                self.add(f"{prefix}{key}[{i}]", f"expected a non-empty string, got {item!r}")
        return tuple(good)

    def table(self, data: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.add(key, f"expected a table ([{key}]), got {value!r}")
            return None
        return value

    def raise_if_any(self) -> None:
        if self.problems:
            raise ProfileError(f"{self.source}: " + "; ".join(self.problems))


def parse_profile(name: str, data: Mapping[str, Any], source: Path) -> HostProfile:
    """Validate a parsed profile table; every problem names its field."""
    check = _Collector(str(source))
    check.unknown_keys(data, _TOP_KEYS, "")
    venv = check.string(data, "venv")
    if "venv" not in data:
        check.add("venv", "missing (the venv's absolute path on the host)")
    elif venv is not None and not venv.startswith("/"):
        check.add("venv", f"must be an absolute path, got {venv!r}")
    python = check.string(data, "python")
    if python is not None and not python.startswith("/"):
        check.add("python", f"must be an absolute path, got {python!r}")
    ssh = check.string(data, "ssh")
    if ssh is not None and (ssh.startswith("-") or any(c.isspace() for c in ssh)):
        check.add("ssh", f"must be [user@]host or an ssh_config alias, got {ssh!r}")
    ssh_args = check.strings(data, "ssh_args")
    allow_commands = data.get("allow_ssh_commands", False)
    if not isinstance(allow_commands, bool):
        check.add("allow_ssh_commands", f"expected true or false, got {allow_commands!r}")
        allow_commands = False
    if not allow_commands:
        _check_ssh_args(check, ssh_args)
    ssh_persist = None
    if "ssh_persist" in data:
        ssh_persist = parse_duration(data["ssh_persist"])
        if ssh_persist is None:
            check.add(
                "ssh_persist",
                f'expected seconds like 60 or "60s", "5m", "1h" (at most 24h; 0: one connection per run), '
                f"got {data['ssh_persist']!r}",
            )
    reference = check.string(data, "reference")
    if reference is not None and not HOST_NAME.match(reference):
        check.add("reference", f"not a host name: {reference!r}")

    gpu = None
    gpu_table = check.table(data, "gpu")
    if gpu_table is not None:
        check.unknown_keys(gpu_table, _GPU_KEYS, "gpu.")
        ccs = check.strings(gpu_table, "cc", "gpu.")
        for i, cc in enumerate(ccs):
            if not _CC.match(cc):
                check.add(f"gpu.cc[{i}]", f'expected a compute capability like "12.0", got {cc!r}')
        driver = check.string(gpu_table, "driver", "gpu.")
        if driver is not None and not _DRIVER.match(driver):
            check.add("gpu.driver", f'expected a driver version like "575.57.08", got {driver!r}')
        gpu = GpuFacts(cc=ccs, driver=driver)

    index = None
    index_table = check.table(data, "index")
    if index_table is not None:
        check.unknown_keys(index_table, _INDEX_KEYS, "index.")
        urls = check.strings(index_table, "urls", "index.")
        for i, url in enumerate(urls):
            if not re.match(r"^(https?|file)://", url):
                check.add(f"index.urls[{i}]", f"expected an http(s):// or file:// URL, got {url!r}")
        index = IndexConfig(urls=urls, find_links=check.strings(index_table, "find_links", "index."))

    checks: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    smoke_table = check.table(data, "smoke")
    if smoke_table is not None:
        check.unknown_keys(smoke_table, _SMOKE_KEYS, "smoke.")
        checks = check.strings(smoke_table, "checks", "smoke.")
        excludes = check.strings(smoke_table, "exclude", "smoke.")
        for i, pattern in enumerate(excludes):
            if not _MODULE_PATTERN.match(pattern) or pattern.count("[") != pattern.count("]"):
                check.add(
                    f"smoke.exclude[{i}]",
                    f'expected a module name pattern like "pip._vendor.*", got {pattern!r}',
                )

    target = None
    target_table = check.table(data, "target")
    if target_table is not None:
        check.unknown_keys(target_table, _TARGET_KEYS, "target.")
        version = check.string(target_table, "python", "target.")
        if version is None:
            check.add("target.python", 'missing (the interpreter version, like "3.12.1")')
        elif not _VERSION.match(version):
            check.add("target.python", f'expected a version like "3.12.1", got {version!r}')
        glibc = check.string(target_table, "glibc", "target.")
        if glibc is not None and not _VERSION.match(glibc):
            check.add("target.glibc", f'expected a version like "2.35", got {glibc!r}')
        target = TargetFacts(
            python=version or "",
            implementation=check.string(target_table, "implementation", "target.") or "cpython",
            glibc=glibc,
            machine=check.string(target_table, "machine", "target.") or "x86_64",
        )

    policy = LockPolicy()
    lock_table = check.table(data, "lock")
    if lock_table is not None:
        # packaging's parser costs more to import than the rest of a profile's checks.
        from packaging.requirements import InvalidRequirement, Requirement

        check.unknown_keys(lock_table, _LOCK_KEYS, "lock.")
        pins = check.strings(lock_table, "pins", "lock.")
        overrides = check.strings(lock_table, "overrides", "lock.")
        for key, values in (("pins", pins), ("overrides", overrides)):
            for i, text in enumerate(values):
                try:
                    Requirement(text)
                except InvalidRequirement as exc:
                    check.add(f"lock.{key}[{i}]", f"not a requirement: {exc}")
        policy = LockPolicy(pins=pins, overrides=overrides)

    pull_value = data.get("pull", "auto")
    pull: PullMode = "auto"
    if pull_value is True:
        pull = "always"
    elif pull_value is False:
        pull = "never"
    elif pull_value != "auto":
        check.add("pull", f'expected true, false or "auto", got {pull_value!r}')

    check.raise_if_any()
    assert venv is not None
    return HostProfile(
        name=name,
        path=source,
        venv=venv,
        python=python,
        ssh=ssh,
        ssh_args=ssh_args,
        allow_ssh_commands=allow_commands,
        ssh_persist=ssh_persist,
        reference=reference,
        gpu=gpu,
        index=index,
        smoke_checks=checks,
        smoke_exclude=excludes,
        target=target,
        policy=policy,
        pull=pull,
    )


def _check_ssh_args(check: _Collector, args: tuple[str, ...]) -> None:
    """Refuse ssh options that run commands, in every spelling ssh accepts.

    Parsed the way ssh's getopt does: ``-o X=y``, ``-oX=y``, ``-o "X y"``, and
    clusters such as ``-vo X=y``; keywords are case-insensitive. ``-F FILE``
    is allowed, but the file is read and refused when it holds such a
    keyword or an ``Include`` (whose files could). Anything that is not an
    option would become ssh's host or command, so it is refused too.
    """
    i = 0
    while i < len(args):
        arg, where = args[i], f"ssh_args[{i}]"
        if not arg.startswith("-") or arg == "-" or arg == "--":
            check.add(where, f"expected an ssh option, got {arg!r}")
            i += 1
            continue
        j = 1
        while j < len(arg):
            flag = arg[j]
            if flag in _SSH_FLAGS_WITH_ARG:
                value = arg[j + 1 :]
                if not value:
                    i += 1
                    value = args[i] if i < len(args) else ""
                if flag == "o":
                    _check_ssh_option(check, where, value)
                elif flag == "F":
                    _check_ssh_config(check, where, value)
                break
            if flag not in _SSH_FLAGS:
                check.add(where, f"unknown ssh option -{flag}")
                break
            j += 1
        i += 1


def _ssh_keyword(text: str) -> str:
    match = _KEYWORD.match(text)
    return match.group(1).lower() if match else ""


def _check_ssh_option(check: _Collector, where: str, value: str) -> None:
    keyword = _ssh_keyword(value)
    if keyword in SSH_COMMAND_KEYWORDS:
        check.add(
            where,
            f"ssh option {value!r} runs a command on this machine; "
            "set allow_ssh_commands = true in the profile if you mean it",
        )


def _check_ssh_config(check: _Collector, where: str, path: str) -> None:
    """An ``-F`` file that exists must hold no command-running keyword (ssh itself reports a missing one)."""
    if path == "none":
        return
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    except OSError as exc:
        check.add(where, f"cannot read ssh config {path}: {exc.strerror}")
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        keyword = _ssh_keyword(line)
        if keyword == "match" and not _EXEC.search(line):
            continue  # Match host/user/...: only exec runs anything
        if keyword in SSH_COMMAND_KEYWORDS or keyword == "include":
            check.add(
                where,
                f"{path}:{lineno}: {line.strip()!r} can run a command on this machine; "
                "set allow_ssh_commands = true in the profile if you mean it",
            )
            return


def load_profile(workspace: Workspace, name: str) -> HostProfile:
    """Read ``hosts/<name>.toml``; a missing or invalid file is a ProfileError."""
    if not HOST_NAME.match(name):
        raise ProfileError(f"{name!r}: not a host name (letters, digits, '.', '_', '-')")
    if f"{name}.toml" == GROUPS_FILE:
        raise ProfileError(f"{name!r}: not a host name: hosts/{GROUPS_FILE} holds the host groups")
    path = workspace.profile_path(name)
    shown = _shown(path, workspace.root)
    if not path.is_file():
        missing = workspace.no_hosts_dir()
        if missing:
            raise ProfileError(f"unknown host {name!r}: {missing}")
        known = sorted(p.stem for p in workspace.hosts_dir.glob("*.toml") if p.name != GROUPS_FILE)
        raise ProfileError(f"{shown}: unknown host {name!r}, no such profile{_suggest(name, known)}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{shown}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{shown}: not valid TOML: {exc}") from exc
    # Unchanged bytes: the tables parsed last time (validated below all the same), and no tomllib import.
    data = tomlmemo.remembered(str(path), text)
    if data is None:
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ProfileError(f"{shown}: not valid TOML: {exc}") from exc
        tomlmemo.remember(str(path), text, data)
    return parse_profile(name, data, Path(shown))


def _suggest(name: str, known: list[str]) -> str:
    """`` (did you mean 'gpu01'? known hosts: ...)``: the closest name first, as git suggests commands."""
    if not known:
        return ""
    import difflib  # only to word an error

    close = difflib.get_close_matches(name, known, n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return f" ({guess}known hosts: {', '.join(known)})"


def _shown(path: Path, root: Path) -> Path:
    try:
        return path.relative_to(root)
    except ValueError:
        return path
