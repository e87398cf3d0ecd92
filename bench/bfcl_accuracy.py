"""BFCL ``simple_python`` accuracy: is one generated call correct against ``possible_answer``?

A re-implementation (no BFCL dependency) of the Python branch of BFCL's AST checker
(``bfcl_eval/eval_checker/ast_eval/ast_checker.py``: ``simple_function_checker`` and the helpers
it calls) for one call.  Our outputs are JSON ``{"name": ..., "arguments": {...}}``; they are
read as BFCL's ``[{name: arguments}]``.  Rules implemented:

* exactly one call; its name equals the spec's ``name`` (no ``.`` → ``_`` renaming: that is a
  per-model option upstream, off for a model that writes the real name);
* every ``required`` parameter present; a parameter unknown to the spec or absent from the
  answer's parameters is an error ("unexpected param");
* types as ``PYTHON_TYPE_MAPPING`` (string→str, integer→int, float→float, boolean→bool,
  array/tuple→list, dict→dict, any→str), exact ``type(v) ==`` tests (so ``true`` is not an
  integer, ``5.0`` is not an integer); an int for a ``float`` parameter is converted first;
  a value whose type is the *answer's* type instead of the spec's is a "variable" (then only
  the plain ``in`` test below applies); arrays/tuples check their items' type one level deep;
* values: strings compared after ``standardize_string`` (drop spaces and ``,./-_*^``,
  lowercase, ``'`` → ``"``); lists elementwise after standardizing their string items
  (order matters, as upstream); dicts key by key (no unknown keys, each value in its
  acceptable list after standardizing, a missing key only if ``""`` is acceptable); lists of
  dicts dict by dict; anything else (numbers, bools) by Python ``in`` (so ``5.0 == 5``);
* a parameter of the answer that is not given is fine only if ``""`` is one of its
  acceptable values.

Not ported: Java/JavaScript converters, parallel/multiple categories, executable checks.
``check(...)`` returns ``(correct, reason)``; ``_self_test()`` (run this file) checks it on real
questions' ground truths and mutations of them.
"""

from __future__ import annotations

import json
import re
from typing import Any

PY_TYPES = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
NESTED = ("array", "tuple")


def standardize_string(s: str) -> str:
    """BFCL's string normalisation: spaces and ``,./-_*^`` removed, lowercased, ``'`` → ``"``."""
    return re.sub(r"[ \,\.\/\-\_\*\^]", "", s).lower().replace("'", '"')


def _std(v: Any) -> Any:
    return standardize_string(v) if type(v) is str else v


def _answer_type(acceptable: list):
    """The type of the first acceptable value that is not ``""`` (optional marker)."""
    for a in acceptable:
        if a != "":
            return type(a)
    return None


def _type_ok(value, acceptable: list, want, nested) -> tuple[bool, bool]:
    """(valid, is_variable) as BFCL's ``type_checker`` (nested check one level deep)."""
    at = _answer_type(acceptable)
    is_var = at is not None and at != want
    if type(value) == want:  # noqa: E721 - BFCL compares exact types
        if nested is None:
            return True, is_var
        for item in acceptable:
            if type(item) is list and all(_type_ok(v, item, nested, None)[0] for v in value):
                return True, is_var
            if type(item) is not list:  # BFCL: a non-list item (e.g. "") passes the check
                return True, is_var
    if at is not None and type(value) == at:  # noqa: E721
        return True, True
    return False, is_var


def _dict_ok(value: dict, acceptables: list) -> bool:
    for ans in acceptables:
        if ans == "":
            continue
        ok = True
        for k, v in value.items():
            if k not in ans or _std(v) not in [_std(a) for a in ans[k]]:
                ok = False
                break
        if ok and all(k in value or "" in acc for k, acc in ans.items()):
            return True
    return False


def _list_dict_ok(value: list, acceptables: list) -> bool:
    for ans in acceptables:
        if (
            type(ans) is list
            and len(ans) == len(value)
            and all(type(v) is dict and _dict_ok(v, [a]) for v, a in zip(value, ans))
        ):
            return True
    return False


def check(fn: dict, output: dict | str | None, answer: list | dict) -> tuple[bool, str]:
    """Is ``output`` (``{"name", "arguments"}``, a dict or its JSON text; None = no output)
    a correct call of ``fn`` (a BFCL function spec) for ``answer`` (BFCL's ground truth
    ``[{name: {param: [acceptable...]}}]``)?  Returns (correct, reason)."""
    if output is None:
        return False, "no output"
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except ValueError:
            return False, "not JSON"
    if not isinstance(output, dict) or not isinstance(output.get("arguments"), dict):
        return False, "not a call object"
    if isinstance(answer, list):
        if len(answer) != 1:
            return False, "answer has several calls (not a simple question)"
        answer = answer[0]
    name = fn["name"]
    if output.get("name") != name:
        return False, "wrong function name"
    pa = next(iter(answer.values()))
    params = output["arguments"]
    spec = fn["parameters"].get("properties", {})
    for p in fn["parameters"].get("required", []):
        if p not in params:
            return False, f"missing required {p!r}"
    for p, value in params.items():
        if p not in spec or p not in pa:
            return False, f"unexpected param {p!r}"
        tdesc = spec[p].get("type", "any")
        want = PY_TYPES.get(tdesc, str)
        nested = None
        if tdesc in NESTED:
            nested = PY_TYPES.get(spec[p].get("items", {}).get("type"), None)
        if tdesc == "float" and type(value) is int:
            value = float(value)
        ok, is_var = _type_ok(value, pa[p], want, nested)
        if not ok:
            return False, f"type of {p!r}"
        if not is_var:
            if want is dict:
                if not _dict_ok(value, pa[p]):
                    return False, f"value of {p!r}"
                continue
            if want is list and nested is dict:
                if not _list_dict_ok(value, pa[p]):
                    return False, f"value of {p!r}"
                continue
            if want is str:
                if standardize_string(value) not in [
                    standardize_string(a) for a in pa[p] if type(a) is str
                ]:
                    return False, f"value of {p!r}"
                continue
            if want is list:
                std = [_std(v) for v in value]
                if std not in [[_std(a) for a in acc] for acc in pa[p] if type(acc) is list]:
                    return False, f"value of {p!r}"
                continue
        if value not in pa[p]:
            return False, f"value of {p!r}"
    for p, acc in pa.items():
        if p not in params and "" not in acc:
            return False, f"missing {p!r} (not optional)"
    return True, "ok"


def _first(acc: list, required: bool):
    """The first acceptable value ("" skipped for a required parameter); a dict answer is
    itself {key: [acceptable]}, so its first values are taken recursively."""
    v = next((a for a in acc if a != ""), "") if required else acc[0]
    if isinstance(v, dict):
        return {k: _first(a, False) for k, a in v.items() if a[0] != ""}
    if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        return [{k: _first(a, False) for k, a in x.items() if a[0] != ""} for x in v]
    return v


def ground_truth_call(fn: dict, answer: list) -> dict:
    """The call made of each parameter's first acceptable value (omitted when that is "",
    unless the parameter is required: some answers list "" first for a required one)."""
    name, pa = next(iter(answer[0].items()))
    req = set(fn["parameters"].get("required", []))
    args = {p: _first(acc, p in req) for p, acc in pa.items()}
    return {"name": name, "arguments": {p: v for p, v in args.items() if v != ""}}


def _self_test(n: int = 400) -> None:
    """Ground truths of the first ``n`` questions are correct; mutations are not."""
    from harness import SHARED

    d = SHARED / "bfcl_function_calling"
    qs = [json.loads(x) for x in (d / "BFCL_v4_simple_python.json").open()][:n]
    ans = {
        a["id"]: a["ground_truth"]
        for a in map(json.loads, (d / "possible_answer" / "BFCL_v4_simple_python.json").open())
    }
    counts = {"gt": 0, "wrong value": 0, "missing": 0, "extra": 0, "name": 0}
    for q in qs:
        fn, gt = q["function"][0], ans[q["id"]]
        call = ground_truth_call(fn, gt)
        ok, why = check(fn, json.dumps(call), gt)
        assert ok, (q["id"], why, call)
        counts["gt"] += 1
        args = call["arguments"]
        for p, v in args.items():  # a wrong value for the first parameter that can be wrong
            bad = (
                {"x": "zz_not_it"}
                if isinstance(v, dict)
                else v + ["zz"]
                if isinstance(v, list)
                else not v
                if isinstance(v, bool)
                else v + 12345
                if isinstance(v, (int, float))
                else "zz not it " + v
            )
            ok, _ = check(fn, {"name": call["name"], "arguments": {**args, p: bad}}, gt)
            assert not ok, (q["id"], p, bad)
            counts["wrong value"] += 1
            break
        for p in fn["parameters"].get("required", []):
            if p in args:
                rest = {k: v for k, v in args.items() if k != p}
                assert not check(fn, {"name": call["name"], "arguments": rest}, gt)[0]
                counts["missing"] += 1
                break
        assert not check(fn, {"name": call["name"], "arguments": {**args, "zz_extra": 1}}, gt)[0]
        counts["extra"] += 1
        assert not check(fn, {"name": call["name"] + "_x", "arguments": args}, gt)[0]
        counts["name"] += 1
    # normalisation and type rules on question 0 (base/height integers, unit optional string)
    fn0, gt0 = qs[0]["function"][0], ans[qs[0]["id"]]
    assert check(
        fn0, {"name": fn0["name"], "arguments": {"base": 10, "height": 5, "unit": "Units"}}, gt0
    )[0]
    assert not check(fn0, {"name": fn0["name"], "arguments": {"base": 10.0, "height": 5}}, gt0)[
        0
    ]  # 10.0 is not an integer
    assert not check(fn0, {"name": fn0["name"], "arguments": {"base": True, "height": 5}}, gt0)[0]
    assert check(
        {"name": "f", "parameters": {"properties": {"x": {"type": "float"}}, "required": ["x"]}},
        {"name": "f", "arguments": {"x": 2}},
        [{"f": {"x": [2.0]}}],
    )[0]
    assert check(
        {"name": "f", "parameters": {"properties": {"s": {"type": "string"}}, "required": ["s"]}},
        {"name": "f", "arguments": {"s": "New-York city"}},
        [{"f": {"s": ["New York City"]}}],
    )[0]
    print(f"bfcl_accuracy self-test passed on {len(qs)} questions: {counts}")


if __name__ == "__main__":
    _self_test()
