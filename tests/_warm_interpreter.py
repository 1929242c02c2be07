"""A warm interpreter: imports torch once, then forks a child for each program to run.

Started by ``tests/forked.py`` (which explains why and when), never by a test itself:

    python tests/_warm_interpreter.py SOCKET

It imports torch and torch._dynamo (which a program's first optimizer imports), prints
``ready``, and serves requests on the Unix socket ``SOCKET``.  A request is a JSON
header ``{"argv": [...], "env": {...}, "cwd": ..., "new_session": bool}`` sent with
the program's stdout and stderr file descriptors.  For each request the server forks;
the child turns into ``python argv[0] argv[1:]`` (standard streams, environment,
working directory, ``sys.argv`` and ``sys.orig_argv``, ``sys.path[0]``, a fresh ``__main__``, reseeded
``random`` and numpy) and runs the script as the interpreter would, exceptions and
exit codes included.  The server answers on the request's connection with the child's
pid, then with its wait status when it ends.  It exits when its standard input closes
(the test process that started it ended).
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import struct
import sys
import types
from typing import Any

_HEADER = struct.Struct("!I")


def _recv_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the test process closed the request")
        data += chunk
    return data


def _request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 2)
    head += _recv_exactly(conn, _HEADER.size - len(head))
    body = _recv_exactly(conn, _HEADER.unpack(head)[0])
    return json.loads(body), fds


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(f"{status}\n".encode())
            except OSError:
                pass
            conn.close()


def serve(path: str) -> tuple[dict[str, Any], list[int]]:
    """Serve until the standard input closes (then exit); returns only in a forked child."""
    import torch  # noqa: F401  (the point of the warm interpreter)
    import torch._dynamo  # noqa: F401

    # What the imports made stays shared with the children: their collections (the last
    # one at exit included) leave it alone instead of copying every page it lies on.
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.fileobj is sys.stdin:
                if not sys.stdin.buffer.read1(4096):
                    sys.exit(0)
            elif key.fileobj == wake_r:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
                _reap(children)
            else:
                conn, _ = listener.accept()
                try:
                    request, fds = _request(conn)
                except (OSError, ValueError):
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:  # the child: leave the server behind
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    for fd in (listener, conn, *children.values()):
                        fd.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    return request, fds
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                try:
                    conn.sendall(f"{pid}\n".encode())
                except OSError:
                    pass
                _reap(children)


def become(request: dict[str, Any], fds: list[int]) -> types.ModuleType:
    """Make this forked child look like ``python argv...`` started afresh; returns the new
    ``__main__`` module, installed in ``sys.modules``."""
    import random

    import numpy

    out, err = fds
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    random.seed()  # a fresh interpreter seeds both from the OS
    numpy.random.seed()
    script = os.path.abspath(request["argv"][0])
    sys.argv = [request["argv"][0], *request["argv"][1:]]
    sys.orig_argv = [sys.executable, *sys.argv]  # what a relaunch of this program runs
    sys.path[0] = os.path.dirname(script)
    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    return main


if __name__ == "__main__":
    _request_fds = serve(sys.argv[1])
    _main = become(*_request_fds)
    del _request_fds
    with open(_main.__file__, "rb") as _source:  # type: ignore[arg-type]
        _code = compile(_source.read(), _main.__file__, "exec")  # type: ignore[arg-type]
    exec(_code, _main.__dict__)
