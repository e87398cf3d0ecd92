"""String formats ``regex``, ``uri-reference``, ``iri``, ``iri-reference``, ``json-pointer``,
``relative-json-pointer`` and ``uri-template``: examples (RFC and JSON-Schema-Test-Suite), no
string accepted that ``jsonschema``'s format checker rejects (examples, samples, random and
mutated strings), and one end-to-end compilation per format over a real tokenizer."""

from __future__ import annotations

import random

import jsonschema
import pytest
from tractable.fsa import nfa as N
from tractable.fsa.json_schema import compile_json_schema, serialize_instance
from tractable.fsa.json_schema.formats import FORMATS, format_nfa
from tractable.fsa.json_schema.formats_regex import REGEX_MAX_DEPTH

from tractable.testing.json_schema import PathSampler

CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
NEW = ["regex", "uri-reference", "iri", "iri-reference", "json-pointer", "relative-json-pointer",
       "uri-template"]


def _accepts(fmt: str, s: str) -> bool:
    return N.matches(format_nfa(fmt), s.encode("utf-8"))


def _checks(fmt: str, s: str) -> bool:
    return CHECKER.conforms(s, fmt)


# (string, automaton accepts, checker accepts).  (s, False, True): left out here (outside the
# RFC, or a documented subset); (s, False, False) with s valid by the RFC: the checker's own
# limitation, which the automaton must follow.
Y, N_, LEFT_OUT, CHECKER_REFUSES = (True, True), (False, False), (False, True), (False, False)

EXAMPLES: dict[str, list[tuple[str, tuple[bool, bool]]]] = {
    "uri-reference": [
        *[(s, Y) for s in [
            "http://foo.bar/?baz=qux#quux", "//foo.bar/?baz=qux#quux", "/abc", "abc",
            "#fragment", "", "?query=1", "//", "./this:that", "../../g", "g;x?y#s", "g:h",
            "//[::1]:8080/p", "//[v1.fe:x]/", "mailto:John.Doe@example.com",
            "urn:oasis:names:specification:docbook:dtd:xml:4.1.2", "//user:pw@host:80/p%20q",
            "http://087.10.0.1/", "tel:+1-816-555-1212", "ldap://[2001:db8::7]/c=GB?one",
            "http://[1:2:3:4:5:6:1.2.3.4]/", "foo://example.com:8042/over/there?name=ferret#nose",
        ]],
        *[(s, N_) for s in [
            "\\\\WINDOWS\\fileshare", "#frag\\ment", "/foobar®.txt", "/%zz", "/a\"b",
            "https://example.org/foobar\\.txt", "/[::1]", "//example.com:abc/p", "1:b",
            "//a@b@example.com/", "a b", "http://a/%4", "//[v1.]/", "//[1::2::3]/", "#a#b",
        ]],
        ("//[::ffff:192.168.0.01]/p", LEFT_OUT),  # RFC-invalid (leading zero): checker accepts
        ("//[V1.fe]/", CHECKER_REFUSES),  # IPvFuture with an uppercase V
    ],
    "iri": [
        *[(s, Y) for s in [
            "http://ƒøø.ßår/?∂éœ=πîx#πîüx", "http://ƒøø.com/blah_(wîkïpédiå)_blah#ßité-1",
            "http://ƒøø.ßår/?q=Test%20URL-encoded%20stuff", "urn:example:resource",
            "http://-.~_!$&'()*+,;=:%40:80%2f::::::@example.com", "file:/etc/hosts",
            "http://[2001:0db8:85a3:0000:0000:8a2e:0370:7334]", "http://192.168.0.1/p",
            "http://[1:2:3:4:5:6:7::]", "http://[::1:2:3:4:5:6:7]", "http://[1:2:3:4:5::1.2.3.4]",
            "http://[v1.fe]", "http://例え.テスト/パス?クエリ\ue000#片", "x:",
        ]],
        *[(s, N_) for s in [
            "http://2001:0db8:85a3:0000:0000:8a2e:0370:7334", "/abc", "\\\\WINDOWS\\filëßåré",
            "âππ", "http://[::ffff:192.168.0.01]", "http://ƒøø.ßår/\n", "http://a/#\ue000",
            "http://a/\ufdd0", "http://a b", "http://[1:2:3:4:5:6:7:8:9]",
        ]],
        # valid by RFC 3987, refused by rfc3987-syntax (the checker): followed
        *[(s, CHECKER_REFUSES) for s in [
            "http://[2001:db8::1]", "http://[::1]", "http://[V1.fe]", "http://ƒøø.ßår/𐌀",
            "http://ƒøø.ßår/?q=\U000f0000",
        ]],
    ],
    "iri-reference": [
        *[(s, Y) for s in [
            "http://ƒøø.ßår/?∂éœ=πîx#πîüx", "//ƒøø.ßår/?∂éœ=πîx#πîüx", "/âππ", "âππ",
            "#ƒrägmênt", "", "../é", "?\ue000",
        ]],
        *[(s, N_) for s in ["\\\\WINDOWS\\filëßåré", "#ƒräg\\mênt", "a:b c", "é:x", "#\ue000"]],
        ("//[::1]/", CHECKER_REFUSES),
    ],
    "json-pointer": [
        *[(s, Y) for s in [
            "", "/", "/foo", "/foo/0", "/a~1b", "/c%d", "/e^f", "/g|h", "/i\\j", "/k\"l", "/ ",
            "/m~0n", "/foo//bar", "/foo/bar/", "/~1~0~0~1~1", "/foo/bar/😎", "/foo\x00bar\n\tbaz",
            "/foo/-", "/~1.1", "/\x7f\u2028",
        ]],
        *[(s, N_) for s in [
            "/foo/bar~", "#", "#/", "#a", "/~0~", "/~0/~", "/~2", "/~-1", "/~~", "a", "0", "a/a",
            "/~\n",
        ]],
    ],
    "relative-json-pointer": [
        *[(s, Y) for s in [
            "1", "0", "0/foo/bar", "2/0/baz/1/zip", "0#", "120/foo/bar", "0//", "10#", "99/~0",
        ]],
        *[(s, N_) for s in [
            "/foo/bar", "-1/foo/bar", "+1/foo/bar", "0##", "01/a", "01#", "", "0/~2",
            "0/foo/bar~", "1#/foo/bar", "1\n", "#",
        ]],
        ("١/foo", LEFT_OUT),  # an Arabic-Indic digit: str.isdigit() in the checker
        # valid by the draft, refused by the checker (a 0 followed by a digit): followed
        *[(s, CHECKER_REFUSES) for s in ["100", "1002/a", "0+1/a"]],
    ],
    "uri-template": [
        *[(s, Y) for s in [
            "http://example.com/dictionary/{term:1}/{term}", "http://example.com/dictionary",
            "dictionary/{term:1}/{term}", "", "a%41b", "a😀b", "{+var}", "{#var}", "{.var}",
            "{/var}", "{;var}", "{?var}", "{&var}", "{var*}", "{x,y}", "{a.b}", "a'b",
            "{var:999}", "http://www.example.com/foo{?query,number}", "{/list*,path:4}",
            "{?x,y,empty}", "{v%41r}", "X{.var:3}", "{_}", "{1}", "\U000e1000{a}\U0010fffd",
        ]],
        *[(s, N_) for s in [
            "http://example.com/dictionary/{term:1}/{term", "{}", "{a,,b}", "{v:0}", "{v:10000}",
            "foo}bar", "{=var}", "{!var}", "{@var}", "{|var}", "{var:1*}", "{a b}", "{{a}}",
        ]],
        # outside RFC 6570 (or a reserved operator), accepted by the uri-template package
        *[(s, LEFT_OUT) for s in [
            "{,var}", "{a..b}", "{v:01}", "a b", "a\x7fb", "{a,}", "{var=def}", "{,+var}",
            "a\"b", "a<b",
        ]],
        # valid by RFC 6570, refused by the uri-template package: followed
        *[(s, CHECKER_REFUSES) for s in ["{%41}", "{v:1000}"]],
    ],
    "regex": [
        *[(s, Y) for s in [
            "([abc])+\\s+$", "^[a-z]{2,3}-\\d+$", "a|b|", "", "(?:a|b)*?", "(?=x)(?!y)z", "[-a]",
            "[^-]", "[\\]\\\\]", "\\u00e9\\x41", "[\\b]", "a{0}", "a{1,}", "a{1,10}", "a{10,20}",
            "a{2,999}", "((a))", "(((a)))", "\\/\\.", "^\\bword\\B$", ".*", "日本語+", "a\nb",
            "[a\\-z]", "[^^]", "[a^]", "[A-Za-z0-9_]", "(|)", "\\{\\}\\[\\]\\(\\)\\|",
        ]],
        *[(s, N_) for s in [
            "^(abc]", "a**", "a{2,1}", "[]", "[^]", "(", ")", "[z-a]", "a{1}{2}", "\\1", "^*",
            "\\b+", "\\", "\\x4", "\\u12", "(?", "x{3,2}?", "\\q",
        ]],
        # accepted by Python's re, left out here (Python-only syntax, not ECMA-262 with the u
        # flag, lookbehind, nesting deeper than REGEX_MAX_DEPTH, the n <= m comparison, the
        # characters of Python's set-operation warnings)
        *[(s, LEFT_OUT) for s in [
            "\\a", "(?P<name>x)", "(?P<n>a)(?P=n)", "(?#comment)a", "(?i)abc",
            "(?<=a)b", "((((a))))", "a{12,15}", "a{100,200}", "a{,3}", "[a&b]", "\\d{1000}",
            "(?=a)*", "a{", "]", "}", "\\0", "[a-]", "\\-",
        ]],
        # valid ECMA-262, refused by re.compile: followed
        *[(s, CHECKER_REFUSES) for s in ["(?<name>x)", "(?<n>a)\\k<n>", "\\u{1F600}", "\\cJ"]],
    ],
}


def test_new_formats_have_automata():
    assert set(NEW) <= FORMATS


@pytest.mark.parametrize("fmt", NEW)
def test_examples(fmt):
    for s, (ours, theirs) in EXAMPLES[fmt]:
        assert _checks(fmt, s) == theirs, (fmt, s, "checker")
        assert _accepts(fmt, s) == ours, (fmt, s)
        assert not ours or theirs  # nothing accepted that the checker refuses


def test_regex_depth_bound():
    deep = "(" * REGEX_MAX_DEPTH + "a" + ")" * REGEX_MAX_DEPTH
    deeper = "(?:" + deep + ")"
    assert _checks("regex", deeper)
    assert _accepts("regex", deep) and not _accepts("regex", deeper)
    look = "(?=" * REGEX_MAX_DEPTH + "a" + ")" * REGEX_MAX_DEPTH
    assert _accepts("regex", look) and not _accepts("regex", "(?=" + look + ")")


# ------------------------------------------------------------------ agreement with the checker

#: Characters random strings are drawn from, per format (the syntax's delimiters, a few
#: characters each side of its classes, non-ASCII).
_ALPHABETS = {
    "json-pointer": "/~01a\"\\\n é",
    "relative-json-pointer": "0123#/~a1\n٣",
    "uri-template": "{}+#./;?&=,!@|:*%4aA_1b'\" -é\U0001F600",
    "regex": "()[]{}|^$\\.*+?-,0129aAzZ:=!<>/&~bBdxuPk é\n",
    "uri-reference": ":/?#[]@!$&'()*+,;=%aF09v.-_~ \"<>\\é",
    "iri": ":/?#[]@!$&'()*+,;=%aF09vV.-_~ \"<>\\é\ue000\U00010000\ufdd0",
    "iri-reference": ":/?#[]@!$&'()*+,;=%aF09vV.-_~ \"<>\\é\ue000\U00010000\ufdd0",
}
#: Strings per format (rfc3987-syntax parses with Earley: a few ms a string).
_COUNTS = {"iri": 600, "iri-reference": 600}


class _Walker:
    """Random accepted strings: uniform out-edge and byte choices, stopping at a final state
    with probability 1/6, steering to the nearest final state past ``max_len`` bytes."""

    def __init__(self, a: N.ByteNFA, max_len: int):
        self.a, self.max_len = a, max_len
        self.out: dict[int, list[tuple[list[int], int]]] = {}
        rev: dict[int, list[int]] = {}
        for s, m, d in a.edges:
            self.out.setdefault(s, []).append(([b for b in range(256) if m >> b & 1], d))
            rev.setdefault(d, []).append(s)
        self.dist = dict.fromkeys(a.finals, 0)
        todo = list(a.finals)
        while todo:
            nxt = []
            for d in todo:
                for s in rev.get(d, ()):
                    if s not in self.dist:
                        self.dist[s] = self.dist[d] + 1
                        nxt.append(s)
            todo = nxt

    def sample(self, rng: random.Random) -> bytes:
        st, buf = self.a.start, bytearray()
        while True:
            done = rng.random() < 1 / 6 or len(buf) > self.max_len or st not in self.out
            if st in self.a.finals and done:
                return bytes(buf)
            moves = self.out[st]
            if len(buf) > self.max_len:
                moves = [(bs, d) for bs, d in moves if self.dist[d] < self.dist[st]]
            bits, st = rng.choice(moves)
            buf.append(rng.choice(bits))


@pytest.mark.parametrize("fmt", NEW)
def test_random_strings_agree_with_checker(fmt):
    """Random strings over the format's alphabet, random accepted strings (walks and uniform
    samples) and their mutations: none accepted by the automaton fails the checker."""
    a = format_nfa(fmt)
    rng = random.Random(1234)
    alphabet = _ALPHABETS[fmt]
    sampler, walker = PathSampler(a, 30), _Walker(a, 40)
    n = _COUNTS.get(fmt, 3000)
    accepted = unsound = 0
    bad = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        else:
            raw = walker.sample(rng) if kind < 3 else sampler.sample(rng)
            s = raw.decode("utf-8")
            if kind == 2:  # mutate an accepted string
                for _ in range(rng.randint(1, 3)):
                    k, c = rng.randint(0, len(s)), rng.choice(alphabet)
                    s = rng.choice([s[:k] + c + s[k:], s[:k] + s[k + 1:], s[:k] + c + s[k + 1:]])
            else:
                assert _accepts(fmt, s)
        if _accepts(fmt, s):
            accepted += 1
            if not _checks(fmt, s):
                unsound += 1
                bad.append(s)
    assert unsound == 0, (fmt, bad[:5])
    assert accepted >= n // 2, (fmt, accepted)  # the accepting side is really exercised


# ------------------------------------------------------------------ end to end

#: (valid instance, invalid instance) per format, the valid one with characters that are
#: escaped in JSON or non-ASCII where the format allows them.
_E2E = {
    "regex": ("^[a-z]+\\\\d\"(?:x|y){2,3}$", "(a"),
    "uri-reference": ("../a/b?c=d#e", "a b"),
    "iri": ("http://例え.jp/パス?q=é", "例え"),
    "iri-reference": ("/パス#é", "#\\"),
    "json-pointer": ("/a~1b/k\"l/\\/\n/é", "/~2"),
    "relative-json-pointer": ("10/a\"", "01"),
    "uri-template": ("http://x.org/{a}/é{?q,r*}", "{a"),
}


@pytest.mark.parametrize("fmt", NEW)
def test_end_to_end(fmt, gpt2_vocab, gpt2_tokenizer):
    schema = {"type": "string", "format": fmt}
    good, bad = _E2E[fmt]
    assert _checks(fmt, good) and not _checks(fmt, bad)
    A = compile_json_schema(schema, gpt2_vocab)

    def ids(s: str) -> list[int]:
        return gpt2_tokenizer.encode(serialize_instance(s, schema)).ids

    assert A.accepts(ids(good))
    assert not A.accepts(ids(bad))
    assert not A.accepts(ids(good)[:-1])  # the closing quote is required


def test_non_ascii_format_with_length_and_pattern():
    """Formats with non-ASCII content count code points under maxLength and intersect with a
    pattern over the decoded string; idn formats are still refused."""
    from tractable.fsa.errors import UnsupportedSchemaError
    from tractable.fsa.json_schema import json_schema_to_nfa

    schema = {"type": "string", "format": "iri", "maxLength": 12, "pattern": "é"}
    a = N.finalize(json_schema_to_nfa(schema))
    for s, ok in [("http://é.jp/", True), ("http://é.jp/a", False), ("http://e.jp/", False),
                  ("http://[::1]", False)]:
        assert N.matches(a, serialize_instance(s, schema).encode()) == ok, s
    b = N.finalize(json_schema_to_nfa({"type": "string", "format": "json-pointer"}))
    assert N.matches(b, b'"/a\\"\\\\\\n\\u0001"')  # the content /a"\<LF><U+0001>, escaped
    assert not N.matches(b, b'"/a\n"')  # a raw control character is not JSON
    with pytest.raises(UnsupportedSchemaError):
        json_schema_to_nfa({"type": "string", "format": "idn-hostname"})
