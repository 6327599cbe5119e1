"""Hostile programs the sandbox must stop, one entry per route found so far (issues 46 and 48): grow the list
with every new route. Each entry has its source, whether it runs with the static check (`validate`), the
error its job must end with (a regular expression) and, for the OS-layer routes, the path it tries to create.

The OS-layer entries run with `validate=False`: they first recover the real `os` module's globals through the
object graph (`().__class__.__base__.__subclasses__()`, the `os._wrap_close` class, its `__init__.__globals__`),
which the static check forbids, and then try what needs no file descriptor (`mkdir`, `symlink`, `mkfifo`) or
one (`open`), in `/tmp` and in the worker's own folder, or try to lift the filesystem layer with `ctypes`.
"""

from __future__ import annotations

import dataclasses

# The real os module's globals, recovered without an import (needs `_`-names: only with validate=False).
RECOVER_OS = """
def real_os():
    for c in ().__class__.__base__.__subclasses__():
        if c.__name__ == '_wrap_close':
            return c.__init__.__globals__
    raise KeyError('no os._wrap_close in this interpreter')
"""

FS_DENIED = r"PermissionError|Read-only file system|Errno 24"  # Landlock, read-only mounts, or RLIMIT_NOFILE


@dataclasses.dataclass(frozen=True, kw_only=True)
class Hostile:
    name: str
    source: str
    expect: str  # a regular expression the job's error must match
    validate: bool = True  # False: the static check is bypassed, the layers below it must hold
    target: str | None = None  # the path the program tries to create (absolute, or relative to the worker's cwd)


def _format_route(name: str, body: str) -> Hostile:
    return Hostile(name=name, source=f"def f(x):\n    return len({body})\n",
                   expect=r"SandboxViolation: format(_map)?\(\.\.\.\) (on a non-literal receiver|with the field)")


STATIC = [
    # the format-string route (issue 48, finding 1): fields read attributes and items past the name check
    _format_route("format_globals", "'{0.__globals__}'.format(print)"),
    _format_route("format_index_chain", "'{0[0]}'.format([print])"),
    _format_route("format_map_chain", "'{x.real}'.format_map({'x': 1})"),
    _format_route("format_nested_spec", "'{0:{1.real}}'.format(1, 2)"),
    Hostile(name="format_variable_receiver", source="def f(x):\n    s = '{0.real}'\n    return len(s.format(x))\n",
            expect=r"SandboxViolation: format\(\.\.\.\) on a non-literal receiver"),
    _format_route("format_unbound", "str.format('{0.__globals__}', print)"),
    _format_route("format_concatenated", "('{0.' + '__globals__}').format(print)"),
    _format_route("format_method_taken", "str(''.join(['{0.real}']).format)"),
    Hostile(name="format_malformed", source="def f(x):\n    return len('{0!}'.format(1))\n",
            expect=r"SandboxViolation: format\(\.\.\.\) with a malformed format string"),
    # the object-graph and import routes (issue 46)
    Hostile(name="dunder_subclasses", source="def f(x):\n    return len(().__class__.__base__.__subclasses__())\n",
            expect="names starting with '_'"),
    Hostile(name="dynamic_import", source="def f(x):\n    return __import__('os').getpid()\n",
            expect="names starting with '_'"),
    Hostile(name="import_os", source="import os\ndef f(x):\n    return os.getpid()\n", expect="import of 'os'"),
    Hostile(name="getattr", source="def f(x):\n    return getattr(x, 'real')\n", expect="NameError: name 'getattr'"),
    Hostile(name="vars", source="def f(x):\n    return len(vars(print))\n", expect="NameError: name 'vars'"),
]


def os_routes(tag: str) -> list[Hostile]:
    """The OS-layer routes (issue 48, finding 2), with `validate=False`; `tag` makes the /tmp paths unique."""
    out = []
    for where in ("tmp", "cwd"):
        for what, call in (("mkdir", "mkdir(T)"), ("symlink", "symlink('/etc/hostname', T)"),
                           ("mkfifo", "mkfifo(T)"), ("open_create", "open(T, 0o101)")):
            name = f"{what}_{where}"
            target = f"/tmp/cf-hostile-{tag}-{name}" if where == "tmp" else f"cf-hostile-{name}"
            src = RECOVER_OS + f"\ndef f(x):\n    T = {target!r}\n    real_os()[{call.split('(')[0]!r}]" \
                               f"({call.split('(', 1)[1]}\n    return 1\n"
            out.append(Hostile(name=name, source=src, expect=FS_DENIED, validate=False, target=target))
    # lift the layer with ctypes (imported by the worker to apply it): remount / read-write, in a new mount
    # namespace if one can be made, then write
    target = f"/tmp/cf-hostile-{tag}-ctypes_remount"
    src = RECOVER_OS + f"""
def f(x):
    ctypes = real_os()['sys'].modules['ctypes']
    libc = ctypes.CDLL(None)
    libc.unshare(0x00020000)
    libc.mount(b'none', b'/', None, 0x1020, None)
    libc.mount(b'none', b'/tmp', None, 0x1020, None)
    real_os()['mkdir']({target!r})
    return 1
"""
    out.append(Hostile(name="ctypes_remount", source=src, expect=FS_DENIED, validate=False, target=target))
    out.append(Hostile(name="fork", source=RECOVER_OS + "\ndef f(x):\n    return real_os()['fork']()\n",
                       expect="BlockingIOError", validate=False))
    return out
