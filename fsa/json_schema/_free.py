"""Free values: the compiler's :class:`_FreeValuesMixin`, any JSON value with arrays and
objects nested to a bounded depth (schema ``true``, open ``additionalProperties``/``items``,
the values of unlisted properties)."""

from __future__ import annotations

from .. import nfa as N
from ._base import _CompilerBase
from ._cache import _cached, _share
from ._nodes import _Leaf
from ._strings import _BODY, _QUOTE
from .formats import number_nfa


class _FreeValuesMixin(_CompilerBase):
    """Unconstrained values, built once per process for each depth and whitespace setting."""

    def _any_leaf(self, depth: int) -> _Leaf:
        """An unconstrained value (schema ``true``), with arrays/objects nested at most
        ``depth`` levels (JSON of unbounded depth is not regular): a subset, with a warning."""
        self.free_depth_used = True
        key = ("any", depth, self._ws_key)
        hit = _cached(key)
        if hit is not None:
            return hit
        from ._builder import _Builder

        string = self._spell(N.concat(_QUOTE, _BODY, _QUOTE))
        parts = {
            "null": N.literal("null"),
            "boolean": N.union(N.literal("true"), N.literal("false")),
            "number": number_nfa(False) if self.canonical else self._numbers(
                None, False, None, False),
            "string": string,
        }
        open_a = N.concat(N.literal("["), self.ws) if self.ws else N.literal("[")
        close_a = N.concat(self.ws, N.literal("]")) if self.ws else N.literal("]")
        open_o = N.concat(N.literal("{"), self.ws) if self.ws else N.literal("{")
        close_o = N.concat(self.ws, N.literal("}")) if self.ws else N.literal("}")
        if depth <= 0:
            parts["array"] = N.concat(open_a, close_a)
            parts["object"] = N.concat(open_o, close_o)
        else:
            sub = self._any_leaf(depth - 1)
            v = N.union(*sub.parts.values())
            for t, op, cl, item in (("array", open_a, close_a, v),
                                    ("object", open_o, close_o,
                                     N.concat(string, self.COLON, v))):
                # one shared copy of the item: open (item (COMMA item)*)? close
                b = _Builder()
                s0 = b.state()
                opened = b.state()
                for f in b.embed(op, s0):
                    b.eps.append((f, opened))
                item_in = b.state()
                after = b.state()
                b.eps.append((opened, item_in))
                for f in b.embed(item, item_in):
                    b.eps.append((f, after))
                for f in b.embed(self.COMMA, after):
                    b.eps.append((f, item_in))
                end = b.state()
                b.finals.add(end)
                for src in (opened, after):
                    for f in b.embed(cl, src):
                        b.eps.append((f, end))
                parts[t] = b.build(s0)
        # shared by every compiler with these whitespace settings: finalize once
        out = _Leaf({t: N.finalize(a) for t, a in parts.items()}, {})
        return _share(key, out)
