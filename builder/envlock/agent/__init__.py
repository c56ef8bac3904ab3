"""The agent: runs inside a host venv's own Python (3.8 to 3.13) and reports.

It is shipped to the host as a zipapp (see ``envlock.agent.bundle``) holding
this package, ``envlock.binary`` and pyelftools, so it needs nothing installed
there. It speaks JSON on stdout; progress goes to stderr as ``@progress``
lines; a failure is one ``envlock-agent: error:`` line on stderr and exit 2.

Keep every module here to the Python 3.8 language and stdlib.
"""

AGENT_PROTOCOL = 1
