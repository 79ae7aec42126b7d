"""A pool of spawned worker processes that outlives its workers (the parse stage's pool).

``run_jobs(jobs, function, workers, limits, take)`` runs ``function(job)`` for each job in
``workers`` spawned processes, one job at a time per process (the next one waits in its pipe, so a
worker never idles between jobs), and hands each result to ``take``
in the parent. Unlike ``concurrent.futures.ProcessPoolExecutor`` (where one dead worker breaks the
pool and every unfinished job fails), a worker that dies costs only the job it was running:

- a worker killed while it runs a job (SIGKILL from the kernel's out-of-memory killer, a segfault
  in a C library on a hostile file) is replaced, and its job is sent again, up to
  ``Limits.tries`` times; then the job is a :class:`JobFailure` naming the signal (and "out of
  memory?" where the kernel's memory group counted an OOM kill meanwhile);
- a job running longer than ``Limits.timeout_s`` has its worker killed and replaced: a failure
  naming the limit;
- each worker's address space is capped at ``Limits.memory_bytes`` (``RLIMIT_AS``): an allocation
  past it raises MemoryError in the worker, which is a failure naming the limit (the worker is
  replaced, its heap may be in a bad state).

The other jobs never notice. A stop (SIGINT, SIGTERM, any error in the parent) terminates the
workers before it goes on up; a worker whose parent is gone exits by itself. ``function`` and the
jobs must be picklable (a module-level function: the workers import it by name).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Callable, Sequence

log = logging.getLogger("kohaku.workers")


@dataclass(frozen=True)
class Limits:
    """What one job may use: seconds (None: no limit), bytes of address space per worker
    (None: no limit), and how many times a job is sent to a worker that dies running it."""

    timeout_s: float | None = None
    memory_bytes: int | None = None
    tries: int = 2


@dataclass(frozen=True)
class JobFailure:
    """A job the pool could not finish: ``kind`` is ``died`` (its worker died ``tries`` times),
    ``timeout`` or ``memory``; ``message`` says what happened, for a person."""

    kind: str
    message: str


def run_jobs(jobs: Sequence[Any], function: Callable[[Any], Any], workers: int, limits: Limits,
             take: Callable[[int, Any], None], name: str = "worker",
             describe: Callable[[Any], str] = lambda job: "a job") -> None:
    """Run ``function(jobs[i])`` in ``workers`` spawned processes; ``take(i, result)`` in this
    process for each job as it ends, ``result`` being a :class:`JobFailure` when the job's worker
    died ``limits.tries`` times, or the job passed a limit. ``describe(job)`` names a job in the
    log (e.g. "document X")."""
    pool = _Pool(function, max(1, min(workers, len(jobs))), limits, name)
    pool.describe = describe
    restore = _raise_on_sigterm()
    try:
        pool.run(jobs, take)
    except BaseException:
        pool.stop(graceful=False)
        raise
    finally:
        restore()
    pool.stop(graceful=True)


class _Slot:
    """One worker process, its pipe, the jobs sent to it (the one it runs, and the next one,
    queued in its pipe so it never waits for the parent between jobs)."""

    def __init__(self, ctx: Any, function: Callable[[Any], Any], limits: Limits, name: str) -> None:
        parent_end, child_end = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, name=name, daemon=True,
                                args=(child_end, function, os.getpid(), limits.memory_bytes))
        self.proc.start()
        child_end.close()
        self.conn: Connection = parent_end
        self.assigned: deque[int] = deque()   # job indices sent, in order
        self.running: int | None = None       # the job the worker said it began
        self.started: float | None = None     # when it began it (the job's clock)
        self.oom_kills = oom_kill_count()

    def send(self, index: int, job: Any) -> None:
        self.assigned.append(index)
        self.conn.send((index, job))

    def end(self, graceful: bool) -> None:
        if graceful and self.proc.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()


class _Pool:
    DEPTH = 2   # jobs sent to a worker at once: the one it runs and the next

    def __init__(self, function: Callable[[Any], Any], workers: int, limits: Limits, name: str) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.function, self.workers, self.limits, self.name = function, workers, limits, name
        self.slots: list[_Slot] = []
        self.replaced = 0
        self.describe: Callable[[Any], str] = lambda job: "a job"

    def _new(self) -> _Slot:
        return _Slot(self.ctx, self.function, self.limits, self.name)

    def run(self, jobs: Sequence[Any], take: Callable[[int, Any], None]) -> None:
        queue = deque(range(len(jobs)))
        deaths: dict[int, int] = {}
        self.slots = [self._new() for _ in range(self.workers)]
        while queue or any(s.assigned for s in self.slots):
            for k, slot in enumerate(self.slots):
                while len(slot.assigned) < self.DEPTH and queue:
                    if not slot.assigned and not slot.proc.is_alive():   # died between jobs
                        slot.end(graceful=False)
                        self.slots[k] = slot = self._new()
                    index = queue.popleft()
                    try:
                        slot.send(index, jobs[index])
                    except (OSError, EOFError):   # the worker died: seen below
                        break
            active = [s for s in self.slots if s.assigned]
            ready = set(wait([s.conn for s in active] + [s.proc.sentinel for s in active],
                             timeout=self._wait_s(active)))
            for slot in active:
                if slot.conn in ready:
                    try:
                        message = slot.conn.recv()
                    except Exception:   # died while (or before) sending: a cut message
                        message = None
                        slot.proc.join(timeout=5)
                        if slot.proc.is_alive():   # a pipe it can no longer use: end it
                            slot.proc.kill()
                            slot.proc.join(timeout=5)
                    if message is not None and message[0] == "start":
                        slot.running, slot.started = message[1], time.monotonic()
                        continue
                    if message is not None:
                        _, index, result = message
                        slot.assigned.remove(index)
                        slot.running = slot.started = None
                        if isinstance(result, JobFailure) and result.kind == "memory":
                            self._replace(slot, queue)   # it exits: its heap may be in a bad state
                        take(index, result)
                        continue
                if slot.proc.sentinel in ready or not slot.proc.is_alive():
                    slot.proc.join(timeout=5)
                    index = slot.running if slot.running is not None else slot.assigned[0]
                    deaths[index] = deaths.get(index, 0) + 1
                    code = slot.proc.exitcode
                    oom = oom_kill_count() > slot.oom_kills
                    self._replace(slot, queue, index)
                    if deaths[index] < self.limits.tries:
                        log.warning("a %s worker died (%s) reading %s; it is sent to a new worker",
                                    self.name, _exit_words(code, oom), self.describe(jobs[index]))
                        queue.appendleft(index)
                        continue
                    take(index, JobFailure("died", (
                        f"the {self.name} process reading it died {deaths[index]} times "
                        f"({_exit_words(code, oom)})")))
                elif (self.limits.timeout_s and slot.running is not None and slot.started is not None
                      and time.monotonic() - slot.started > self.limits.timeout_s):
                    index = slot.running
                    self._replace(slot, queue, index)
                    take(index, JobFailure("timeout", f"still running after {self.limits.timeout_s:g} s; "
                                           "its worker was stopped"))

    def _wait_s(self, active: list[_Slot]) -> float:
        if not self.limits.timeout_s:
            return 1.0
        now = time.monotonic()
        left = [s.started + self.limits.timeout_s - now for s in active if s.started is not None]
        return min(1.0, max(0.01, min(left))) if left else 1.0

    def _replace(self, slot: _Slot, queue: deque[int], done: int | None = None) -> None:
        """End ``slot``'s process (dead or not), put the jobs it had not begun (all but
        ``done``) back at the front of the queue, and start a fresh process in its place."""
        for index in reversed(slot.assigned):
            if index != done:
                queue.appendleft(index)
        slot.assigned.clear()
        slot.end(graceful=False)
        self.slots[self.slots.index(slot)] = self._new()
        self.replaced += 1

    def stop(self, graceful: bool) -> None:
        for slot in self.slots:
            slot.end(graceful)
        if not graceful and self.slots:
            log.warning("%s pool stopped: %d worker process(es) ended", self.name, len(self.slots))
        elif self.replaced:
            log.info("%s pool: %d worker process(es) replaced", self.name, self.replaced)
        self.slots = []


def _exit_words(code: int | None, oom: bool) -> str:
    if code is not None and code < 0:
        try:
            words = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            words = f"killed by signal {-code}"
    else:
        words = f"exit code {code}"
    return words + (", out of memory? the kernel's out-of-memory killer ended a process meanwhile"
                    if oom else "")


def oom_kill_count() -> int:
    """Processes the kernel's out-of-memory killer ended in this process's memory cgroup (v2
    ``memory.events``, v1 ``memory.oom_control``); 0 where the kernel does not say."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates = [Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events"]
        elif "memory" in controllers.split(","):
            candidates = [Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control"]
        else:
            continue
        for file in candidates:
            try:
                for entry in file.read_text().splitlines():
                    field, _, value = entry.partition(" ")
                    if field == "oom_kill":
                        return int(value)
            except (OSError, ValueError):
                continue
    return 0


def _worker_main(conn: Connection, function: Callable[[Any], Any], parent: int,
                 memory_bytes: int | None) -> None:
    """A worker: take (index, job) from the pipe, send ("start", index) as it begins and
    ("done", index, result) when it ends, until None."""
    _worker_init(parent)
    if memory_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(memory_bytes), int(memory_bytes)))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, job = message
        conn.send(("start", index))
        try:
            result = function(job)
        except MemoryError:
            result = JobFailure("memory", "MemoryError in the worker")
        except Exception as exc:  # the function should not raise: name what it raised
            result = JobFailure("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(("done", index, result))
        except MemoryError:
            conn.send(("done", index, JobFailure("memory", "MemoryError while sending the result")))
        if isinstance(result, JobFailure) and result.kind == "memory":
            return


def _worker_init(parent: int) -> None:
    """In each worker: Ctrl-C is the parent's to handle (it stops the workers), and a watchdog
    ends the worker when its parent is gone (killed without a chance to stop them)."""
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _raise_on_sigterm() -> Callable[[], None]:
    """SIGTERM raises SystemExit(143) in the main thread while workers run (so they are stopped
    on the way out); returns the function that puts the previous handler back."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    return lambda: signal.signal(signal.SIGTERM, previous)
