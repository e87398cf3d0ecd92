"""Progress of long compiles (issue 21: "progress output for any compile that takes over ~2 s,
CLI and, opt-in, the Python API"): :mod:`tractable.fsa.progress`."""

from __future__ import annotations

import io
import threading

import pytest
from tractable.fsa.errors import InvalidArgumentError
from tractable.fsa.json_schema import compile_json_schema
from tractable.fsa.progress import Progress, compile_progress, report
from tractable.fsa.regex import clear_regex_cache, compile_regex

STAGES = ("start", "lift", "label rows", "done")


def test_events_follow_the_compile_and_end_with_done(gpt2_vocab):
    events: list[Progress] = []
    clear_regex_cache()
    # every=0: each report is shown when it is made (deterministic, whatever the timing)
    with compile_progress(events.append, after=0.0, every=0.0):
        A = compile_regex(r"[a-z]{0,400}(,[0-9]{1,5}){0,50}", gpt2_vocab)
    assert A.num_states > 400
    assert events and events[-1].stage == "done"
    assert [e.stage for e in events].count("done") == 1
    assert all(e.stage.startswith(STAGES) for e in events), {e.stage for e in events}
    assert all(a.elapsed <= b.elapsed for a, b in zip(events, events[1:]))
    assert any(e.stage.startswith("lift") for e in events)
    # counted stages say how far: 0 <= done < total
    for e in events:
        if e.done is not None:
            assert e.total and 0 <= e.done < e.total
            assert f"{e.done:,}/{e.total:,}" in e.line()


def test_nested_compiles_report_as_one(gpt2_vocab):
    """compile_json_schema → TokenAutomaton.from_byte_nfa: two marked stages, one clock, one
    "done"."""
    events: list[Progress] = []
    with compile_progress(events.append, after=0.0, every=0.01):
        compile_json_schema({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 300}, "n": {"type": "integer"}},
            "required": ["name", "n"]}, gpt2_vocab, canonical=False)
    assert [e.stage for e in events].count("done") == 1
    assert events[-1].stage == "done"


def test_quiet_unless_asked_and_for_short_compiles(gpt2_vocab, capsys):
    clear_regex_cache()
    compile_regex(r"[0-9]{4}-[0-9]{2}", gpt2_vocab)  # no reporter: nothing anywhere
    report("ignored", 1, 2)
    buf = io.StringIO()
    clear_regex_cache()
    with compile_progress(stream=buf):  # default after=2 s: a short compile says nothing
        compile_regex(r"[0-9]{4}-[0-9]{2}", gpt2_vocab)
    assert buf.getvalue() == ""
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    assert not [t for t in threading.enumerate() if t.name == "tractable-progress"]


def test_lines_on_a_stream(gpt2_vocab):
    buf = io.StringIO()
    clear_regex_cache()
    with compile_progress(stream=buf, after=0.0, every=0.01):
        compile_regex(r"[a-z]{0,300}", gpt2_vocab)
    lines = buf.getvalue().splitlines()
    assert lines and all(line.startswith("tractable: compiling,") for line in lines)
    assert lines[-1].endswith(": done")


def test_bad_times_are_typed_errors():
    for kw in ({"after": -1.0}, {"every": -0.5}):
        with pytest.raises(InvalidArgumentError), compile_progress(**kw):
            pass


def test_warnings_still_point_at_the_caller(gpt2_vocab):
    """The compile functions mark their stage with a ``with`` block, not a decorator: a
    decorator's frame made every compile warning point into contextlib."""
    with compile_progress(lambda p: None), pytest.warns(UserWarning) as rec:
        compile_json_schema({"type": "object", "properties": {"n": {"type": "integer"}}},
                            gpt2_vocab)
    assert rec and all(w.filename == __file__ for w in rec), [w.filename for w in rec]
