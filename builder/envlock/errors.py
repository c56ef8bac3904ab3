"""One package-wide error family; the CLI maps each to one line on stderr."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FINDINGS = 1
    COULD_NOT_RUN = 2


class EnvlockError(Exception):
    """A problem the user can fix: printed as one line, exit 2.

    The message names the file, field or host it is about, so the user knows
    where to look without a traceback.
    """

    exit_code = ExitCode.COULD_NOT_RUN


class ProfileError(EnvlockError):
    """A host profile is missing or invalid."""


class LockError(EnvlockError):
    """A lock file is missing, unreadable or invalid."""


class CaptureError(EnvlockError):
    """The venv on a host could not be captured."""


class IndexError_(EnvlockError):
    """A package index could not be read."""


class TransportError(EnvlockError):
    """The connection to a host could not be made, or was lost."""


class AgentError(EnvlockError):
    """The agent on a host failed; carries its stderr."""


class AgentReportedError(AgentError):
    """The agent stopped and said why itself (an ``@error`` line).

    ``code`` is the kind of failure (``envlock.agent.protocol.ERROR_CODES``;
    ``unspecified`` from an agent older than structured errors), ``details``
    the facts the agent attached (a path, an errno).
    """

    def __init__(
        self, message: str, code: str = "unspecified", details: dict[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.details: dict[str, object] = dict(details or {})


class AgentProtocolError(AgentError):
    """The agent on a host speaks another protocol version than this envlock (a stale bundle)."""


class ResolveError(EnvlockError):
    """No set of artifacts runs on the target; the message says which and what would fix it."""


class PublishError(EnvlockError):
    """A private index refused an upload, or holds other bytes under a wheel's name."""


class GroupError(EnvlockError):
    """``hosts/groups.toml`` is invalid, or a command line names a group or host it cannot expand."""
