"""Shared benchmark harness: paths, tokenizers, timing statistics, time limits, result files.

Every script under ``bench/`` imports what it needs from here (``from harness import …``; a
script run as ``python bench/x.py`` has ``bench/`` on ``sys.path``), so that the machine line,
the versions, the percentiles and the result files are written the same way everywhere:

* paths — :data:`ROOT` (the checkout), :data:`RESULTS` (``bench/results``), :data:`FIXTURES`
  (``fixtures/``, or ``$TRACTABLE_FIXTURES``), :data:`SHARED` (``../shared/data``);
* tokenizers — :func:`tokenizer_path` (``llama3`` / ``qwen3`` / ``gpt2`` → ``tokenizer.json``),
  :func:`load_vocabulary` (a :class:`~tractable.fsa.vocabulary.TokenVocabulary` from it);
* statistics — :func:`quantile` (linear interpolation, numpy.percentile's rule: every median
  and p90 here), :func:`summarize`
  (median / p90 / n of a list of seconds or microseconds), :func:`median_p90_us`
  (``{"median_us", "p90_us", "n"}``);
* time limits — :func:`time_limit` (SIGALRM in the main thread; raises :class:`BenchTimeout`);
* worker processes — :class:`WorkerProcess` (a subprocess fed through queues, killed and
  restarted when it does not answer in time), :func:`run_threads` (items handed out to threads,
  each with its own worker);
* the environment of a run — :func:`versions`, :func:`cpu_name`, :func:`machine`,
  :func:`git_commit`, :func:`git_dirty_files` (the changed files under
  :data:`LIBRARY_DIRS`), :func:`loadavg`, :func:`command_line` (the
  command with every option spelled out), :func:`environment` (date, machine, versions, commit
  in one dict);
* result files — :func:`save_json` (atomic: a stopped run never leaves half a file),
  :func:`load_json`, :func:`write_result` (``<stem>.md`` and ``<stem>.json`` side by side),
  :func:`save_rows` / :func:`load_rows` (the ``{"meta", "rows"}`` file).

Nothing here is timed or measured itself; it only keeps the scripts from repeating it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing as mp
import os
import platform
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "ROOT",
    "RESULTS",
    "FIXTURES",
    "SHARED",
    "TOKENIZERS",
    "tokenizer_path",
    "load_vocabulary",
    "quantile",
    "summarize",
    "median_p90_us",
    "BenchTimeout",
    "time_limit",
    "WorkerProcess",
    "run_threads",
    "versions",
    "cpu_name",
    "machine",
    "git_commit",
    "LIBRARY_DIRS",
    "git_dirty_files",
    "loadavg",
    "utc_now",
    "command_line",
    "environment",
    "save_json",
    "load_json",
    "write_result",
    "save_rows",
    "load_rows",
]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
FIXTURES = Path(os.environ.get("TRACTABLE_FIXTURES", ROOT / "fixtures"))
SHARED = ROOT.parent / "shared" / "data"
#: the real tokenizers that ``scripts/fetch_fixtures.py`` lays under ``fixtures/tokenizers``
TOKENIZERS = ("llama3", "qwen3", "gpt2")


# ----------------------------------------------------------------------------- tokenizers


def tokenizer_path(name: str = "llama3") -> Path:
    """``fixtures/tokenizers/<name>/tokenizer.json``; a path to a file is returned as it is.

    Raises ``FileNotFoundError`` naming the fetch script when the fixture is missing."""
    p = Path(name)
    if p.suffix == ".json" or p.is_file():
        return p
    p = FIXTURES / "tokenizers" / name / "tokenizer.json"
    if not p.exists():
        raise FileNotFoundError(f"{p} is missing: run `.venv/bin/python scripts/fetch_fixtures.py`")
    return p


def load_vocabulary(name: str = "llama3", **kwargs):
    """A :class:`TokenVocabulary` from :func:`tokenizer_path` (``kwargs`` go to
    ``TokenVocabulary.from_tokenizer_file``)."""
    from tractable.fsa.vocabulary import TokenVocabulary

    return TokenVocabulary.from_tokenizer_file(tokenizer_path(name), **kwargs)


# ----------------------------------------------------------------------------- statistics


def quantile(xs: Iterable[float], q: float) -> float:
    """The ``q`` quantile (``q`` in [0, 1]) of ``xs`` by linear interpolation between the two
    nearest ranks, as ``numpy.percentile``'s default (so ``quantile(xs, 0.5)`` is
    ``statistics.median``); NaN for an empty list.  The one rule of every table here."""
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = min(max(float(q), 0.0), 1.0) * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(xs: Sequence[float], scale: float = 1.0) -> dict:
    """``{"median": …, "p90": …, "max": …, "n": …}`` of ``xs`` multiplied by ``scale``."""
    ys = [x * scale for x in xs]
    return {"median": quantile(ys, 0.5), "p90": quantile(ys, 0.9),
            "max": max(ys) if ys else float("nan"), "n": len(ys)}


def median_p90_us(samples: Sequence[float], scale: float = 1e6) -> dict:
    """``{"median_us": …, "p90_us": …, "n": …}`` of ``samples`` multiplied by ``scale`` (seconds
    to microseconds by default; ``1e-3`` for nanoseconds), by :func:`quantile`."""
    us = [x * scale for x in samples]
    return {"median_us": quantile(us, 0.5), "p90_us": quantile(us, 0.9), "n": len(us)}


# ----------------------------------------------------------------------------- time limits


class BenchTimeout(Exception):
    """A step of a benchmark ran past its :func:`time_limit`."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`BenchTimeout` in the main thread after ``seconds`` (SIGALRM; 0 = none).

    The previous handler and timer are restored on exit, so limits do not leak between steps."""
    if not seconds or seconds <= 0:
        yield
        return

    def _raise(_signum, _frame):
        raise BenchTimeout(f"over {seconds:g} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------------------- worker processes


class WorkerProcess:
    """A worker process fed through queues: ``target(inq, outq, *args)`` answers each item put
    on ``inq`` with one value on ``outq`` (``None`` on ``inq`` stops it).

    :meth:`ask` waits for the answer up to a time limit; a worker that does not answer in time
    (or, with ``poll``, dies) is killed and restarted, and ``ask`` returns ``None`` (:attr:`why`
    says why).  With ``ready=True`` the worker first puts ``"ready"`` on ``outq`` when its
    set-up (outside any timing) is done, and the constructor waits for it.  ``context`` is a
    :mod:`multiprocessing` start method (``None``: the platform's default)."""

    def __init__(self, target, *args, ready: bool = False, context: str | None = None):
        self.target, self.args, self.ready = target, args, ready
        self.ctx = mp.get_context(context)
        self.why = ""
        self._start()

    def _start(self):
        self.inq, self.outq = self.ctx.Queue(), self.ctx.Queue()
        self.p = self.ctx.Process(target=self.target, args=(self.inq, self.outq, *self.args),
                                  daemon=True)
        self.p.start()
        if self.ready:  # the worker says when its set-up (outside any timing) is done
            assert self.outq.get(timeout=600) == "ready"

    def ask(self, item, timeout: float, poll: float | None = None):
        """The worker's answer to ``item``, or ``None`` after ``timeout`` seconds (checking every
        ``poll`` seconds, when given, that the worker is still alive)."""
        self.inq.put(item)
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.outq.get(timeout=poll or timeout)
            except queue.Empty:
                if poll and self.p.is_alive() and time.monotonic() < deadline:
                    continue
                self.why = (f"worker died (exit code {self.p.exitcode})" if not self.p.is_alive()
                            else f"no answer in {timeout:.0f} s")
                self.p.kill()
                self.p.join()
                self._start()
                return None

    def close(self):
        """Ask the worker to stop; kill it if it has not within 10 s."""
        self.inq.put(None)
        self.p.join(timeout=10)
        if self.p.is_alive():
            self.p.kill()


def run_threads(items, jobs: int, start, step, record) -> None:
    """Hand ``items`` out to ``jobs`` threads, each with its own worker ``start()`` (a
    :class:`WorkerProcess`): ``step(worker, item)`` runs outside the lock, ``record(item,
    result)`` under it; each worker is closed when no item is left."""
    lock = threading.Lock()
    it = iter(items)

    def work():
        worker = start()
        while True:
            with lock:
                item = next(it, None)
            if item is None:
                break
            r = step(worker, item)
            with lock:
                record(item, r)
        worker.close()

    threads = [threading.Thread(target=work) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# ----------------------------------------------------------------------------- environment


def versions(*packages: str) -> dict:
    """``{"python": …, package: version or None}`` from the installed distributions."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict = {"python": platform.python_version()}
    for p in packages:
        try:
            out[p] = version(p.replace("_", "-"))
        except PackageNotFoundError:
            out[p] = None
    return out


def cpu_name() -> str:
    """The CPU model from ``/proc/cpuinfo`` (or ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine(threads: int | None = None, note: str = "") -> str:
    """One line: architecture, CPU, cores, torch threads (when given), GPU if torch sees one."""
    parts = [platform.machine(), cpu_name(), f"{os.cpu_count()} CPU cores"]
    if threads is not None:
        parts.append(f"torch threads {threads}")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        parts.append(f"GPU {torch.cuda.get_device_name()}")
    else:
        parts.append("no GPU")
    parts.append(platform.platform())
    if note:
        parts.insert(0, note)
    return ", ".join(parts)


#: the package sources whose changes make :func:`git_commit` ``+dirty``
LIBRARY_DIRS = ("fsa", "kernels", "hmm", "decode", "tractable")


def _git(*args: str) -> str:
    """``git -C ROOT *args``'s output, stripped (raises ``OSError`` / ``CalledProcessError``)."""
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def git_dirty_files() -> list[str]:
    """``git status --porcelain`` lines of the package sources (:data:`LIBRARY_DIRS`, the
    directories :func:`git_commit` checks for ``+dirty``); ``[]`` when git fails."""
    try:
        return _git("status", "--porcelain", "--", *LIBRARY_DIRS).splitlines()
    except (OSError, subprocess.CalledProcessError):
        return []


def git_commit() -> str:
    """Short HEAD of the checkout, with ``+dirty`` when the package sources are modified."""
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--", *LIBRARY_DIRS)
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + ("+dirty" if dirty else "")


def loadavg() -> list[float] | None:
    """The 1 / 5 / 15-minute load averages (``os.getloadavg``, rounded to 0.01), or ``None``
    where the platform has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def utc_now() -> str:
    """The current time, ``YYYY-MM-DD HH:MM UTC``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def command_line(script: str, args: argparse.Namespace, skip: Iterable[str] = (),
                 prefix: str = "OMP_NUM_THREADS=1 python") -> str:
    """``"<prefix> bench/<script> --opt value …"`` with every option of ``args`` spelled out
    (a list as its values one after the other), except those named in ``skip`` and those that
    are ``None``: the command that reruns the benchmark as it ran.  A ``True`` flag is written
    bare (``--flag``, as ``store_true`` parses it) and a ``False`` one left out."""
    skip = set(skip)

    def opt(k: str, v) -> str:
        flag = f"--{k.replace('_', '-')}"
        if v is True:
            return flag
        return f"{flag} {' '.join(map(str, v)) if isinstance(v, list) else v}"

    return f"{prefix} bench/{script} " + " ".join(
        opt(k, v) for k, v in vars(args).items()
        if k not in skip and v is not None and v is not False)


def environment(*packages: str, threads: int | None = None, note: str = "") -> dict:
    """``{"date", "machine", "commit", "command", "versions"}`` for a result file's header."""
    return {"date": utc_now(), "machine": machine(threads, note), "commit": git_commit(),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "versions": versions("tractable", *packages)}


# ----------------------------------------------------------------------------- result files


def _default(o):
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):  # numpy / torch scalars
        return o.item()
    return str(o)


def save_json(path: Path | str, data, indent: int = 1) -> Path:
    """Write ``data`` as JSON atomically (temporary file, then ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=indent, default=_default))
    os.replace(tmp, path)
    return path


def load_json(path: Path | str, default=None):
    """The JSON at ``path``, or ``default`` when there is no such file."""
    path = Path(path)
    if not path.exists():
        return default
    return json.loads(path.read_text())


def write_result(stem: Path | str, markdown: str, raw=None, echo: bool = True) -> Path:
    """``<stem>.md`` (the table) and, when ``raw`` is given, ``<stem>.json`` beside it.

    A bare name is taken under :data:`RESULTS`; returns the markdown path."""
    stem = Path(stem)
    if not stem.is_absolute() and stem.parent == Path("."):
        stem = RESULTS / stem
    stem = stem.with_suffix("") if stem.suffix in (".md", ".json") else stem
    stem.parent.mkdir(parents=True, exist_ok=True)
    if raw is not None:
        save_json(stem.with_name(stem.name + ".json"), raw)
    md = stem.with_name(stem.name + ".md")
    md.write_text(markdown if markdown.endswith("\n") else markdown + "\n")
    if echo:
        print(f"wrote {md}")
    return md


def save_rows(out: Path | str, meta: dict, rows: list[dict]) -> None:
    """Write ``{"meta": meta, "rows": rows}`` to ``<out>.json`` (atomically, :func:`save_json`)."""
    save_json(Path(out).with_suffix(".json"), {"meta": meta, "rows": rows})


def load_rows(out: Path | str) -> tuple[dict, list[dict]]:
    """``(meta, rows)`` of the file :func:`save_rows` wrote to ``<out>.json``."""
    data = load_json(Path(out).with_suffix(".json"))
    return data["meta"], data["rows"]
