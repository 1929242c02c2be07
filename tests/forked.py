"""Start test programs from a warm interpreter instead of a fresh one.

Most multi-process tests run small programs (``python tests/.../program.py args``) as
the replicas, workers and parameter servers of a cluster: some 300 processes in the
whole suite.  Each fresh interpreter spends about 2.3 CPU-seconds importing torch, and
most about 2 more on torch's dynamo at their first optimizer, before doing anything
the test is about; on a 2-core machine that was over a third of the suite.

:func:`popen` and :func:`run` start such a program by forking a warm interpreter
(``tests/_warm_interpreter.py``) that has imported torch and torch._dynamo once and
does nothing else.  The child is still a real, separate process with its own pid,
standard streams, environment, working directory, ``sys.argv``, ``__main__`` and
process group (``start_new_session``); it builds its own process groups, sockets and
threads, imports distrib itself, and exits through the interpreter's own shutdown, so
exit codes, tracebacks and ``atexit`` behave as after ``python program.py``.  What it
shares with its siblings is the torch import already done, Python's string-hash seed
(``random`` and numpy are reseeded from the OS, as a fresh interpreter does), and the
objects of that import, frozen out of garbage collection (``gc.freeze``: collecting
them would copy every page they lie on into each child, about 0.7 s of its exit).
A program's replicas started by distrib itself (MirroredStrategy's other devices,
``distrib run``) are fresh interpreters, so a cluster usually mixes both kinds.

Only ``python script.py args`` is started this way; ``-c``, ``-m`` (the launcher),
``-`` and prefixed commands (``ip netns exec``) start a fresh interpreter, as does any
program started through distrib's own launcher.  Environment variables that torch or
the interpreter read at start-up (``PYTHON*``, ``OMP_*``, ``MKL_*``, ``TORCH*``,
``LD_*``, ...) choose the warm interpreter: one is started for each distinct set of
their values, so a program never runs under another's start-up settings.
``DISTRIB_TEST_FRESH=1`` in the test process's environment starts every program in a
fresh interpreter instead.

Example::

    proc = popen([str(PROGRAM), "--steps", "3"], env=clean_env())
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

_SERVER = str(Path(__file__).with_name("_warm_interpreter.py"))
_STARTUP = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS", "LD_", "MALLOC",
            "GLIBC", "TORCH", "PYTORCH", "CUDA", "NCCL", "XLA", "PJRT", "TF_CPP")
_HEADER = struct.Struct("!I")
_READY_SECONDS = 300  # importing torch takes seconds; a loaded machine may take minutes
_servers: dict[tuple[tuple[str, str], ...], _Server] = {}
_lock = threading.Lock()

Stream = int | IO[Any] | None


def _startup_key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(_STARTUP)))


class _Server:
    """One warm interpreter (see the module docstring)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.folder = tempfile.mkdtemp(prefix="distrib-warm-")
        self.path = os.path.join(self.folder, "s")
        self.log = open(os.path.join(self.folder, "stderr"), "w+")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, _SERVER, self.path], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, cwd=self.folder)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], _READY_SECONDS)
        line = self.proc.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self.proc.kill()
            self.proc.wait()
            self.log.seek(0)
            raise RuntimeError(f"the warm interpreter was not ready within {_READY_SECONDS} s "
                               f"(its stderr: {self.log.read()[-3000:]!r}); "
                               "DISTRIB_TEST_FRESH=1 starts every program fresh")

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def start(self, argv: list[str], env: dict[str, str], cwd: str, fds: list[int],
              new_session: bool) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        body = json.dumps({"argv": argv, "env": env, "cwd": cwd,
                           "new_session": new_session}).encode()
        socket.send_fds(conn, [_HEADER.pack(len(body))], fds)
        conn.sendall(body)
        return conn


def _server(env: dict[str, str]) -> _Server:
    key = _startup_key(env)
    with _lock:
        server = _servers.get(key)
        if server is None or server.proc.poll() is not None:
            server = _servers[key] = _Server(env)
        return server


@atexit.register
def _close_servers() -> None:
    for server in _servers.values():
        server.close()


class Forked:
    """A program forked from a warm interpreter: the parts of ``subprocess.Popen`` the
    tests use (``pid``, ``returncode``, ``stdout``/``stderr`` pipes, ``poll``, ``wait``,
    ``communicate``, ``send_signal``, ``terminate``, ``kill``)."""

    def __init__(self, args: list[str], conn: socket.socket, stdout: IO[str] | None,
                 stderr: IO[str] | None) -> None:
        self.args = args
        self.stdin = None  # a forked program reads /dev/null
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._conn = conn
        self._answer = b""
        self._read: dict[str, list[str]] = {}
        self._readers: list[threading.Thread] = []
        conn.settimeout(120)
        self.pid = int(self._line())
        conn.settimeout(None)

    def _line(self) -> bytes:
        while b"\n" not in self._answer:
            chunk = self._conn.recv(64)
            if not chunk:
                raise RuntimeError(f"the warm interpreter stopped answering about {self.args}")
            self._answer += chunk
        line, self._answer = self._answer.split(b"\n", 1)
        return line

    def poll(self) -> int | None:
        return self._wait(0.0)

    def _wait(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            # (a quick program's status may have come with its pid, already read)
            if b"\n" in self._answer or select.select([self._conn], [], [], timeout)[0]:
                self.returncode = os.waitstatus_to_exitcode(int(self._line()))
                self._conn.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._wait(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def communicate(self, input: str | None = None, timeout: float | None = None
                    ) -> tuple[str | None, str | None]:
        assert input is None, "forked programs read nothing from stdin"
        if not self._readers:
            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr)):
                if stream is not None:
                    parts = self._read[name] = []
                    thread = threading.Thread(target=_drain, args=(stream, parts), daemon=True)
                    thread.start()
                    self._readers.append(thread)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._readers:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out = "".join(self._read["stdout"]) if "stdout" in self._read else None
        err = "".join(self._read["stderr"]) if "stderr" in self._read else None
        return out, err

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _drain(stream: IO[str], parts: list[str]) -> None:
    parts.append(stream.read())
    stream.close()


def _warm(args: list[str], prefix: list[str] | None) -> bool:
    return (not prefix and bool(args) and args[0].endswith(".py")
            and os.environ.get("DISTRIB_TEST_FRESH") != "1")


def _fd(stream: Stream, default: int) -> tuple[int, int | None]:
    """The fd to hand the child for ``stream``, and our read end of a pipe (or None)."""
    if stream == subprocess.PIPE:
        r, w = os.pipe()
        return w, r
    if stream == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_WRONLY), None
    if stream is None:
        return os.dup(default), None
    return os.dup(stream.fileno()), None  # type: ignore[union-attr]


def popen(args: list[str], env: dict[str, str], cwd: str | Path | None = None,
          stdout: Stream = subprocess.PIPE, stderr: Stream = subprocess.PIPE,
          start_new_session: bool = False, prefix: list[str] | None = None
          ) -> Forked | subprocess.Popen[str]:
    """``subprocess.Popen([*prefix, sys.executable, *args], text=True, ...)``, forked
    from a warm interpreter when ``args`` is ``script.py ...`` (see the module docstring)."""
    if not _warm(args, prefix):
        return subprocess.Popen([*(prefix or []), sys.executable, *args], env=env, cwd=cwd,
                                stdout=stdout, stderr=stderr, text=True,
                                start_new_session=start_new_session)
    server = _server(env)
    (out_w, out_r), (err_w, err_r) = _fd(stdout, 1), _fd(stderr, 2)
    try:
        conn = server.start(args, env, os.path.abspath(cwd or os.getcwd()), [out_w, err_w],
                            start_new_session)
    finally:
        os.close(out_w)
        os.close(err_w)
    return Forked(args, conn, None if out_r is None else open(out_r, encoding="utf-8"),
                  None if err_r is None else open(err_r, encoding="utf-8"))


def run(args: list[str], env: dict[str, str], cwd: str | Path | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, *args], capture_output=True, text=True, ...)``,
    forked from a warm interpreter where :func:`popen` would be."""
    proc = popen(args, env, cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.wait(), out, err)
