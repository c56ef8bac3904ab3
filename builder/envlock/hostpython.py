"""Which base interpreter builds a host's venv, when the profile names none.

A user's target profile often holds only ``venv``, ``ssh`` and ``reference``.
``lock`` and ``apply`` then look on the host, in this order (docs/design.md,
"The target's interpreter"):

1. the profile's ``python``, when set (nothing else is tried);
2. for ``apply``: the interpreter the lock was made for (its pyvenv
   ``executable``, else ``home``/pythonX.Y);
3. the venv's own ``pyvenv.cfg`` home, when the venv exists (its version wins:
   a venv already on 3.12 is a 3.12 target);
4. the reference's interpreter path, when it exists on the host at the same
   minor version;
5. ``pythonX.Y`` on the host's PATH, then the usual install layouts: pyenv
   (``~/.pyenv/versions/X.Y*``), uv-managed (``~/.local/share/uv/python``),
   ``/usr/local/bin`` and ``/usr/bin``.

The search runs as one POSIX ``sh`` script on the host (no Python needed yet),
which reports every candidate it tried; when none fits, the error lists them
and the profile key that fixes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envlock.agent.protocol import PingAnswer
from envlock.errors import EnvlockError
from envlock.hosts import HostProfile
from envlock.pyvenv import interpreter_paths
from envlock.transport import Transport, agent_answer, open_transport, run_agent

if TYPE_CHECKING:
    from envlock.lock.model import Lock

# Arguments: WANT ("3.12", or "" for any), OWN ("1": the venv's own
# interpreter is accepted at any version), then the candidates, each
# "exe:PATH", "cfg:VENV", "path:NAME" or "glob:PATTERN" ("~/" at the start
# means $HOME). One output line per interpreter run:
# CANDIDATE<TAB>PATH<TAB>VERSION<TAB>SYS.EXECUTABLE (the real interpreter
# behind a shim or a symlink). The search stops at the first that fits, so the
# usual case starts one interpreter.
_FIND = r"""
want=$1; own=$2; shift 2
ver='import sys; sys.stdout.write("%d.%d.%d\t%s" % (sys.version_info[:3] + (sys.executable,)))'
report() {
  if [ -n "$2" ] && [ -f "$2" ] && [ -x "$2" ]; then
    v=$("$2" -I -c "$ver" 2>/dev/null) || return 0
    printf '%s\t%s\t%s\n' "$1" "$2" "$v"
    case "$v" in "$want".*|"$want"\ *) exit 0 ;; esac
    [ -z "$want" ] && exit 0
    case "$1" in cfg:*) [ "$own" = 1 ] && exit 0 ;; esac
  fi
  return 0
}
for c in "$@"; do
  kind=${c%%:*}; arg=${c#*:}
  case "$kind" in
    exe) report "$c" "$arg" ;;
    path) report "$c" "$(command -v "$arg" 2>/dev/null)" ;;
    cfg)
      cfg="$arg/pyvenv.cfg"
      [ -f "$cfg" ] || continue
      home=$(sed -n 's/^home *= *//p' "$cfg" | head -n 1)
      v=$(sed -n 's/^version\(_info\)\{0,1\} *= *\([0-9]*\.[0-9]*\).*/\2/p' "$cfg" | head -n 1)
      [ -n "$home" ] && [ -n "$v" ] && report "$c" "$home/python$v" ;;
    glob)
      case "$arg" in "~/"*) arg="$HOME/${arg#"~/"}" ;; esac
      for f in $arg; do report "$c" "$f"; done ;;
  esac
done
exit 0
"""


@dataclass(frozen=True, slots=True)
class HostPython:
    path: str
    version: str  # "3.12.1"
    how: str  # which rule found it, for messages

    @property
    def major_minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _search_candidates(venv: str, want: str | None, hints: list[str], fallbacks: list[str]) -> list[str]:
    words = [f"exe:{h}" for h in hints if h]
    words.append(f"cfg:{venv.rstrip('/')}")
    words += [f"exe:{h}" for h in fallbacks if h]
    if want:
        exe = f"python{want}"
        words += [
            f"path:{exe}",
            f"glob:~/.pyenv/versions/{want}*/bin/{exe}",
            f"glob:~/.local/share/uv/python/cpython-{want}*/bin/{exe}",
            f"exe:/usr/local/bin/{exe}",
            f"exe:/usr/bin/{exe}",
        ]
    return words


def _describe(word: str) -> str:
    kind, _, arg = word.partition(":")
    return {
        "exe": arg,
        "cfg": f"{arg}/pyvenv.cfg home",
        "path": f"{arg} on PATH",
        "glob": arg,
    }.get(kind, word)


def find_base_python(
    transport: Transport,
    profile: HostProfile,
    *,
    want: str | None,
    hints: list[str] | None = None,
    fallbacks: list[str] | None = None,
    venv_decides: bool = True,
) -> HostPython:
    """The base interpreter on ``profile``'s host (see the module docstring).

    ``want``: the minor version required ("3.12"), or None for any.
    ``hints``: interpreter paths to try before the venv's own (the lock's);
    ``fallbacks``: paths to try after it (the reference's).
    ``venv_decides``: the venv's own interpreter is accepted at any version
    (lock: an existing venv's Python is the target's); apply passes False.
    """
    if profile.python is not None:
        found = _run_search(transport, "", False, [f"exe:{profile.python}"])
        if not found:
            raise EnvlockError(f"host {profile.name}: no Python at {profile.python} ({profile.path}: python)")
        word, path, version = found[0]
        return HostPython(path, version, f"{profile.path}: python")
    words = _search_candidates(profile.venv, want, hints or [], fallbacks or [])
    for word, path, version in _run_search(transport, want or "", venv_decides, words):
        own_venv = word.startswith("cfg:") and venv_decides
        if want is None or own_venv or _minor(version) == want:
            return HostPython(path, version, _describe(word))
    tried = ", ".join(_describe(w) for w in words)
    wanted = f"Python {want}" if want else "a Python"
    raise EnvlockError(
        f"host {profile.name}: no base interpreter for {profile.venv}: {wanted} not found "
        f"(tried {tried}); set `python` in {profile.path}"
    )


def _run_search(transport: Transport, want: str, own: bool, words: list[str]) -> list[tuple[str, str, str]]:
    out = transport.run_shell(_FIND, [want, "1" if own else "0", *words])
    found = []
    for line in out.decode("utf-8", "replace").splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[2]:
            # A shim (pyenv's) execs the real interpreter: build with that one.
            found.append((parts[0], parts[3] or parts[1], parts[2]))
    # The script reports in candidate order; keep that order.
    order = {w: i for i, w in enumerate(words)}
    return sorted(found, key=lambda f: order.get(f[0], len(order)))


def probe_target(profile: HostProfile, reference: Lock) -> dict[str, Any]:
    """Interpreter, platform and GPUs of a target host, from its base interpreter.

    The agent's ``ping`` answer plus ``python``: the interpreter's path, which
    the target lock records (pyvenv ``home``) so apply builds with the same one.
    """
    ref_version = reference.interpreter.version
    want = _minor(profile.target.python) if profile.target else _minor(ref_version)
    with open_transport(profile) as transport:
        found = find_base_python(
            transport, profile, want=want, fallbacks=interpreter_paths(reference.pyvenv, ref_version)
        )
        ping: PingAnswer = agent_answer(
            transport, run_agent(transport, profile.venv, ["ping"], python=found.path), "ping"
        )
    answer: dict[str, Any] = dict(ping)
    answer["python"] = found.path
    return answer
