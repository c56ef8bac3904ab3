"""The agent: runs inside a host venv's own Python (3.8 to 3.13) and reports.

It is shipped to the host as a zipapp (see ``envlock.transport.bundle``)
holding this package, ``envlock.binary`` and pyelftools, so it needs nothing
installed there. What it says is defined in ``envlock.agent.protocol``: JSON
answers on stdout; ``@progress`` and ``@stats`` lines on stderr; a failure is
one ``@error`` line on stderr and exit 2.

Keep every module here to the Python 3.8 language and stdlib.
"""


def describe_exit(returncode: int) -> str:
    """How a child process ended, in words: ``killed by signal 9 (SIGKILL)``, not ``exit status -9``.

    A shell reports a child killed by signal N as exit status 128 + N (so
    does ssh for a remote command), which is said too.
    """
    import signal

    def name(number: int) -> str:
        try:
            return signal.Signals(number).name
        except ValueError:
            return "signal %d" % number

    if returncode < 0:
        return "killed by signal %d (%s)" % (-returncode, name(-returncode))
    if 128 < returncode < 128 + 65:
        return "exit status %d (what a process killed by signal %d, %s, reports)" % (
            returncode,
            returncode - 128,
            name(returncode - 128),
        )
    return "exit status %d" % returncode
