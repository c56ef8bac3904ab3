"""The lock model: ``locks/pylock.<host>.toml`` (PEP 751) plus its file manifest."""

from envlock.lock.model import (
    FORMAT_VERSION,
    Artifact,
    FileEntry,
    Lock,
    NativeLib,
    Package,
)

__all__ = ["FORMAT_VERSION", "Artifact", "FileEntry", "Lock", "NativeLib", "Package"]
