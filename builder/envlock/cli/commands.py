"""The command table: which module defines each command, and its one-line help.

Only the module of the command being run is imported, so `envlock --help` and
every command start fast however many commands there are.
"""

from __future__ import annotations

# name -> (module in envlock.cli, one-line help), in the order `envlock --help` lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "capture": ("capture_cmd", "freeze a host's live venv into locks/pylock.<host>.toml"),
    "lock": (
        "lock_cmd",
        "resolve a per-host lock from the reference's, for the host's Python, glibc, GPU and driver",
    ),
    "build": (
        "build_cmd",
        "build a package from its sdist for a host's GPU, pinned to the host lock's wheels",
    ),
    "apply": ("apply_cmd", "rebuild a host's venv from its lock, verify it and swap it in"),
    "rollback": ("apply_cmd", "swap back the venv that the last apply replaced"),
    "verify": ("verify_cmd", "compare a host's live venv with its lock, file by file (like rpm -V)"),
    "smoke": ("smoke_cmd", "import every module of a host's venv, in parallel, and classify failures"),
    "diff": ("diff_cmd", "compare two locks, or a lock and a live venv"),
    "review": (
        "review_cmd",
        "review lock changes between git revisions (text, Markdown for a PR comment, JSON)",
    ),
    "inspect": ("inspect_cmd", "will these libraries load and find a kernel image on a GPU?"),
    "export": ("export_cmd", "write a host's lock in another tool's format"),
    "publish": (
        "publish_cmd",
        "upload a lock's repacked and store wheels to a private index and point the lock at it",
    ),
    "show": ("show_cmd", "print a lock as a table, or as sorted one-line-per-package text for git diff"),
    "git-setup": ("gitsetup_cmd", "configure git diff to show locks as one line per package"),
    "bundle": ("bundle_cmd", "write one file that `apply HOST --from FILE` installs with no network"),
    "gc": ("gc_cmd", "free store and cache objects that no lock in the workspace needs"),
}


def summary(name: str) -> str:
    return COMMANDS[name][1]
