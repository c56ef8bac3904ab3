"""Host groups: ``hosts/groups.toml`` names sets of hosts a fleet command runs over.

```toml
blackwell = ["ct200", "ct201"]
hopper = ["ct129"]
gpu = ["@blackwell", "@hopper", "ct300"]   # a group may name groups
```

A command line names hosts and ``@group``s; ``expand_targets`` turns them into
host names, each once, in the order first named. The file is checked as a
whole (like a profile: every problem, one line, naming the file and the
group): values are lists of host names or ``@group``s, groups named must
exist, and no group may contain itself through others. Every host reached
must have a profile, so a typo stops the command before any host is touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envlock.errors import GroupError, ProfileError
from envlock.hosts import GROUPS_FILE, HOST_NAME, load_profile
from envlock.workspace import Workspace

MAX_PROBLEMS = 20  # named in one error line; a generated file can hold thousands
MAX_NAMED = 50  # known groups named in a message


@dataclass(frozen=True, slots=True)
class Targets:
    """The hosts a command line names, expanded."""

    hosts: tuple[str, ...]  # each once, in the order first named
    # answer in the fleet shape (a table, JSON with a per-host list): more than one
    # word or any @group, decided by the command line, not by what a group holds
    fleet: bool
    words: tuple[str, ...]  # as given


def is_fleet(words: Sequence[str]) -> bool:
    return len(words) > 1 or any(word.startswith("@") for word in words)


def read_groups(workspace: Workspace) -> dict[str, tuple[str, ...]]:
    """``hosts/groups.toml`` checked as a whole; {} when there is none."""
    path = workspace.hosts_dir / GROUPS_FILE
    shown = workspace.shown(path)
    if not path.is_file():
        return {}
    import tomllib  # only with hosts/groups.toml: a one-host command never parses it

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GroupError(f"{shown}: cannot read: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise GroupError(f"{shown}: not valid TOML: {exc}") from exc
    groups, problems = _parse(data)
    problems += _cycles(groups)
    if problems:
        shown_problems = problems[:MAX_PROBLEMS]
        if len(problems) > MAX_PROBLEMS:
            shown_problems.append(f"and {len(problems) - MAX_PROBLEMS} more")
        raise GroupError(f"{shown}: " + "; ".join(shown_problems))
    return groups


def _parse(data: Mapping[str, object]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    groups: dict[str, tuple[str, ...]] = {}
    problems: list[str] = []
    for name, value in data.items():
        if not HOST_NAME.match(name):
            problems.append(f"{name!r}: not a group name (letters, digits, '.', '_', '-')")
            continue
        if not isinstance(value, list):
            problems.append(f'{name}: expected a list of host names or "@group"s, got {value!r}')
            continue
        members: list[str] = []
        for i, item in enumerate(value):
            bare = item[1:] if isinstance(item, str) and item.startswith("@") else item
            if not isinstance(bare, str) or not HOST_NAME.match(bare):
                problems.append(f'{name}[{i}]: expected a host name or "@group", got {item!r}')
            else:
                members.append(item)
        groups[name] = tuple(members)
    known = None  # the list of known groups, built once (a file may name thousands of unknown ones)
    for name, listed in groups.items():
        for member in listed:
            if member.startswith("@") and member[1:] not in groups:
                known = _known(groups) if known is None else known
                problems.append(f"{name}: unknown group {member!r}{known}")
    return groups, problems


def _cycles(groups: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Each group that contains itself through others, as the path that closes the loop.

    An iterative depth-first walk that visits each group once: a file is
    hostile input, and 100,000 groups nested in a chain must neither exhaust
    Python's recursion limit nor take quadratic time.
    """
    found: list[str] = []
    done: set[str] = set()
    for root in groups:
        if root in done:
            continue
        path = [root]
        on_path = {root}
        stack = [iter(groups[root])]
        while stack:
            member = next(stack[-1], None)
            if member is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
                continue
            child = member[1:] if member.startswith("@") else None
            if child is None or child not in groups or child in done:
                continue
            if child in on_path:
                loop = [*path[path.index(child) :], child]
                found.append("group cycle " + " -> ".join(f"@{g}" for g in loop))
                continue
            path.append(child)
            on_path.add(child)
            stack.append(iter(groups[child]))
    return found


def _known(groups: Mapping[str, object]) -> str:
    if not groups:
        return ""
    names = sorted(groups)
    more = f", and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    return f" (known groups: {', '.join('@' + g for g in names[:MAX_NAMED])}{more})"


def expand_targets(workspace: Workspace, words: Sequence[str]) -> Targets:
    """Hosts and ``@group``s -> host names, each with a profile, each once."""
    groups: dict[str, tuple[str, ...]] | None = None
    hosts: dict[str, str | None] = {}  # host -> the group that named it (None: the command line)
    shown = workspace.shown(workspace.hosts_dir / GROUPS_FILE)

    expanded: set[str] = set()  # each group once: a group named twice adds no host the second time

    def add(word: str) -> None:
        nonlocal groups
        # Depth first, in the order named, without recursion (groups nest as deep as a file says).
        todo: list[tuple[str, str | None]] = [(word, None)]
        while todo:
            member, via = todo.pop()
            if not member.startswith("@"):
                hosts.setdefault(member, via)
                continue
            name = member[1:]
            if groups is None:
                groups = read_groups(workspace)
                if not groups and not (workspace.hosts_dir / GROUPS_FILE).is_file():
                    raise GroupError(
                        f"{member}: unknown group, there is no {shown} "
                        '(define groups there: blackwell = ["ct200", "ct201"])'
                    )
            if name not in groups:
                raise GroupError(f"{shown}: unknown group {member!r}{_known(groups)}")
            if not groups[name]:
                raise GroupError(f"{shown}: group {member!r} has no hosts")
            if name in expanded:
                continue
            expanded.add(name)
            todo.extend((child, member) for child in reversed(groups[name]))

    for word in words:
        add(word)
    for host, via in hosts.items():
        if not workspace.profile_path(host).is_file() or host == GROUPS_FILE.removesuffix(".toml"):
            try:
                load_profile(workspace, host)  # its message: where it looked, the closest name
            except ProfileError as exc:
                if via is None:
                    raise
                raise GroupError(f"{shown}: {via} names an unknown host: {exc}") from exc
    return Targets(tuple(hosts), is_fleet(words), tuple(words))
