"""What a long command tells whoever waits for it: named hooks, in resolvelib's ``BaseReporter`` style.

Commands (capture, apply, verify, smoke) take a ``Reporter`` and call its
hooks; the agent's ``@progress`` lines reach it through ``run_agent``. Only
``cli/`` draws anything: it subclasses this and overrides what it shows.
"""

from __future__ import annotations


class Reporter:
    """Hooks a command calls as it goes; each does nothing here.

    ``progress`` may be called from a thread that reads the agent's stderr,
    while the command's own thread waits for the agent's answer; a command
    never calls two hooks at once.
    """

    def step(self, message: str) -> None:
        """A step starts (``fetch 12 artifacts (sha256 checked)``): a line of its own."""

    def progress(self, phase: str, done: int, total: int, detail: str) -> None:
        """``done`` of ``total`` in ``phase``.

        Phases: ``hash`` (bytes; ``detail`` counts files), ``stage``,
        ``install``, ``verify``, ``smoke`` (``detail``: the import or check
        that just ended) on the host; ``fetch`` and ``push`` (items) here;
        ``upload`` (bytes; ``detail``: the wheel) for ``envlock publish``.
        """
