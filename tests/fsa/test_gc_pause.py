"""The cyclic collector paused during compiles (:mod:`tractable.fsa.gc_pause`)."""

from __future__ import annotations

import gc
import threading

import pytest
from tractable.fsa.gc_pause import paused_gc
from tractable.fsa.json_schema import compile_json_schema
from tractable.fsa.progress import compile_progress
from tractable.fsa.regex import clear_regex_cache, compile_regex


@pytest.fixture(autouse=True)
def _collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_pause_is_reentrant_and_restores_the_collector():
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_pause_keeps_a_disabled_collector_disabled():
    gc.disable()
    with paused_gc():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_pause_restores_after_an_exception():
    with pytest.raises(ValueError), paused_gc():
        raise ValueError("x")
    assert gc.isenabled()


def test_overlapping_pauses_in_threads_enable_only_after_the_last():
    inside = threading.Event()
    release = threading.Event()
    seen: list[bool] = []

    def other():
        with paused_gc():
            inside.set()
            release.wait(10)
            seen.append(gc.isenabled())

    t = threading.Thread(target=other)
    with paused_gc():
        t.start()
        assert inside.wait(10)
    # this thread's pause ended; the other thread's still holds
    assert not gc.isenabled()
    release.set()
    t.join(10)
    assert seen == [False]
    assert gc.isenabled()


@pytest.mark.parametrize("front", ["regex", "json_schema"])
def test_compiles_run_with_the_collector_paused(gpt2_vocab, front):
    states: list[tuple[bool, str]] = []
    me = threading.get_ident()

    def record(p):  # the compiling thread's own reports (the timer thread may add a line
        if threading.get_ident() == me:  # after the pause ended, before "done")
            states.append((gc.isenabled(), p.stage))

    clear_regex_cache()
    # every=0: each stage report calls back at once, from the compiling thread
    with compile_progress(record, after=0.0, every=0.0):
        if front == "regex":
            compile_regex(r"[a-z]{0,40}(,[0-9]{1,5}){0,5}", gpt2_vocab)
        else:
            compile_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}},
                                gpt2_vocab)
    # the first ("start") and last ("done") reports come from the compile's mark, outside the
    # pause; every stage between them runs paused
    assert len(states) >= 3 and not any(e for e, _ in states[1:-1]), states
    assert gc.isenabled()
