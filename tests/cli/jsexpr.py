#!/usr/bin/env python3
"""jsexpr.py: the JavaScript expressions of tests/cli/server.sh, evaluated without node.

server.sh checks its responses with small JavaScript expressions over the parsed body `o` and
runs them with node, which the project installs; the GPU machine has python3 and no node, so
this evaluates the same expressions there (server.sh picks it when node is missing, or with
JS_EVAL=python). It implements the subset server.sh writes: literals, o, member and index access,
calls, arrow functions with an expression body (x => ..., () => ...), ! - typeof, * / % + -,
< <= > >=, === !== == !=, && ||, ?:, and these names: Array.isArray, JSON.stringify, JSON.parse,
parses (JSON.parse, or undefined where it throws), and the string / array methods includes,
startsWith, endsWith, trim, indexOf, slice, some, every, map, filter, join, plus .length.
Anything else is an error (exit status 1), as an expression node cannot run fails there.

Usage: jsexpr.py eval FILE EXPR   prints EXPR's value as console.log would (o = FILE's JSON, or null)
       jsexpr.py items N          {"input": [{}, ... N times]}
       jsexpr.py deep N           {"input":"x","metadata":{"k":[[...[1]...]]}}, N levels
       jsexpr.py content TEXT     {"content": TEXT}
       jsexpr.py sse-framing FILE ok, or bad K of N (Responses SSE: event: T + data of type T, no [DONE])
       jsexpr.py anthropic-text   the text of the content_block_delta events of data lines on stdin
       jsexpr.py template FILE OUT   writes FILE's JSON field chat_template to OUT
"""
import json
import math
import re
import sys


class Undef:
    def __repr__(self):
        return "undefined"


UNDEF = Undef()


class JSError(Exception):
    pass


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def truthy(v):
    if v is None or v is UNDEF or v is False:
        return False
    if is_num(v):
        return v != 0 and not (isinstance(v, float) and math.isnan(v))
    if isinstance(v, str):
        return v != ""
    return True


def strict_eq(a, b):
    if is_num(a) and is_num(b):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, (dict, list)):
        return a is b
    return a == b


def typeof(v):
    if v is UNDEF:
        return "undefined"
    if isinstance(v, bool):
        return "boolean"
    if is_num(v):
        return "number"
    if isinstance(v, str):
        return "string"
    if callable(v):
        return "function"
    return "object"


def num_str(v):
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    return str(v)


def to_str(v):
    if isinstance(v, str):
        return v
    if v is None:
        return "null"
    if v is UNDEF:
        return "undefined"
    if isinstance(v, bool):
        return "true" if v else "false"
    if is_num(v):
        return num_str(v)
    if isinstance(v, list):
        return ",".join("" if e is None or e is UNDEF else to_str(e) for e in v)
    return "[object Object]"


def stringify(v):
    def clean(x):
        if isinstance(x, float) and x.is_integer():
            return int(x)
        if isinstance(x, list):
            return [None if e is UNDEF else clean(e) for e in x]
        if isinstance(x, dict):
            return {k: clean(e) for k, e in x.items() if e is not UNDEF}
        return x
    if v is UNDEF:
        return UNDEF
    return json.dumps(clean(v), separators=(",", ":"), ensure_ascii=False)


def parses(s):
    try:
        return json.loads(s)
    except Exception:
        return UNDEF


TOKEN = re.compile(r"""\s*(?:(?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|"""
                   r"""(?P<id>[A-Za-z_$][A-Za-z0-9_$]*)|(?P<op>===|!==|==|!=|<=|>=|=>|&&|\|\||[-+*/%!<>?:.,()\[\]]))""")
ESC = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}


def unescape(body):
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        n = body[i + 1]
        if n == "u":
            out.append(chr(int(body[i + 2:i + 6], 16)))
            i += 6
        else:
            out.append(ESC.get(n, n))
            i += 2
    return "".join(out)


def tokenize(src):
    toks, pos = [], 0
    while pos < len(src):
        if src[pos:].strip() == "":
            break
        m = TOKEN.match(src, pos)
        if not m:
            raise JSError("cannot read the expression at: " + src[pos:pos + 30])
        pos = m.end()
        kind = m.lastgroup
        text = m.group(kind)
        if kind == "num":
            toks.append(("num", float(text) if any(c in text for c in ".eE") else int(text)))
        elif kind == "str":
            toks.append(("str", unescape(text[1:-1])))
        else:
            toks.append((kind, text))
    toks.append(("end", None))
    return toks


class Parser:
    """Recursive descent to closures env -> value (env: dict of names)."""

    def __init__(self, src):
        self.t = tokenize(src)
        self.i = 0

    def peek(self, k=0):
        return self.t[self.i + k]

    def take(self, text=None):
        tok = self.t[self.i]
        if text is not None and tok[1] != text:
            raise JSError("expected %r, found %r" % (text, tok[1]))
        self.i += 1
        return tok

    def is_op(self, text, k=0):
        tok = self.peek(k)
        return tok[0] == "op" and tok[1] == text

    def parse(self):
        e = self.expr()
        if self.peek()[0] != "end":
            raise JSError("unexpected %r" % (self.peek()[1],))
        return e

    def expr(self):
        # arrow functions: x => e, () => e, (x) => e, (x, y) => e
        if self.peek()[0] == "id" and self.is_op("=>", 1):
            params = [self.take()[1]]
            self.take("=>")
            return self.arrow(params)
        if self.is_op("("):
            j, params = self.i + 1, []
            while self.t[j][0] == "id" and (self.t[j + 1][1] in (",", ")")):
                params.append(self.t[j][1])
                j += 1 if self.t[j + 1][1] == ")" else 2
            if self.t[j][1] == ")" and self.t[j + 1][1] == "=>":
                self.i = j + 2
                return self.arrow(params)
        return self.ternary()

    def arrow(self, params):
        body = self.expr()

        def make(env):
            def fn(*args):
                inner = dict(env)
                for k, p in enumerate(params):
                    inner[p] = args[k] if k < len(args) else UNDEF
                return body(inner)
            return fn
        return make

    def ternary(self):
        c = self.binary(0)
        if self.is_op("?"):
            self.take()
            a = self.expr()
            self.take(":")
            b = self.expr()
            return lambda env: a(env) if truthy(c(env)) else b(env)
        return c

    LEVELS = [("||",), ("&&",), ("===", "!==", "==", "!="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%")]

    def binary(self, level):
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek()[0] == "op" and self.peek()[1] in self.LEVELS[level]:
            op = self.take()[1]
            right = self.binary(level + 1)
            left = self.combine(op, left, right)
        return left

    @staticmethod
    def combine(op, a, b):
        if op == "||":
            return lambda env: (lambda x: x if truthy(x) else b(env))(a(env))
        if op == "&&":
            return lambda env: (lambda x: b(env) if truthy(x) else x)(a(env))
        if op in ("===", "=="):
            return lambda env: strict_eq(a(env), b(env))
        if op in ("!==", "!="):
            return lambda env: not strict_eq(a(env), b(env))

        def arith(env):
            x, y = a(env), b(env)
            if op == "+" and (isinstance(x, str) or isinstance(y, str)):
                return to_str(x) + to_str(y)
            if op in ("<", "<=", ">", ">=") and isinstance(x, str) and isinstance(y, str):
                return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]
            if not (is_num(x) or isinstance(x, bool)) or not (is_num(y) or isinstance(y, bool)):
                raise JSError("%s on %s and %s" % (op, typeof(x), typeof(y)))
            x, y = float(x), float(y)
            if op == "+":
                return x + y
            if op == "-":
                return x - y
            if op == "*":
                return x * y
            if op == "/":
                return x / y if y else (math.nan if x == 0 else math.copysign(math.inf, x))
            if op == "%":
                return math.fmod(x, y) if y else math.nan
            return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]
        return arith

    def unary(self):
        if self.is_op("!"):
            self.take()
            e = self.unary()
            return lambda env: not truthy(e(env))
        if self.is_op("-"):
            self.take()
            e = self.unary()
            return lambda env: -e(env)
        if self.peek() == ("id", "typeof"):
            self.take()
            e = self.unary()
            return lambda env: typeof(e(env))
        return self.postfix()

    def postfix(self):
        e = self.primary()
        while True:
            if self.is_op("."):
                self.take()
                name = self.take()[1]
                e = (lambda obj, name: lambda env: member(obj(env), name))(e, name)
            elif self.is_op("["):
                self.take()
                k = self.expr()
                self.take("]")
                e = (lambda obj, k: lambda env: member(obj(env), k(env)))(e, k)
            elif self.is_op("("):
                self.take()
                args = []
                while not self.is_op(")"):
                    args.append(self.expr())
                    if not self.is_op(")"):
                        self.take(",")
                self.take(")")
                e = (lambda f, args: lambda env: call(f(env), [a(env) for a in args]))(e, args)
            else:
                return e

    def primary(self):
        kind, v = self.take()
        if kind in ("num", "str"):
            return lambda env: v
        if kind == "id":
            consts = {"true": True, "false": False, "null": None, "undefined": UNDEF}
            if v in consts:
                c = consts[v]
                return lambda env: c
            def name(env):
                if v not in env:
                    raise JSError(v + " is not defined")
                return env[v]
            return name
        if kind == "op" and v == "(":
            e = self.expr()
            self.take(")")
            return e
        if kind == "op" and v == "[":
            items = []
            while not self.is_op("]"):
                items.append(self.expr())
                if not self.is_op("]"):
                    self.take(",")
            self.take("]")
            return lambda env: [x(env) for x in items]
        raise JSError("unexpected %r" % (v,))


def member(obj, key):
    if obj is None or obj is UNDEF:
        raise JSError("cannot read %r of %s" % (key, to_str(obj)))
    if isinstance(obj, dict):
        if isinstance(key, str) and key in obj:
            return obj[key]
        if is_num(key) and num_str(key) in obj:
            return obj[num_str(key)]
        return UNDEF
    if isinstance(obj, (list, str)):
        if key == "length":
            return len(obj)
        if is_num(key):
            k = int(key)
            return obj[k] if key == k and 0 <= k < len(obj) else UNDEF
        return method(obj, key)
    return UNDEF


def method(obj, name):
    if isinstance(obj, str):
        table = {
            "includes": lambda s, *a: s in obj,
            "startsWith": lambda s, *a: obj.startswith(s),
            "endsWith": lambda s, *a: obj.endswith(s),
            "trim": lambda *a: obj.strip(" \t\n\r\v\f"),
            "indexOf": lambda s, *a: obj.find(s),
            "slice": lambda a=0, b=None: obj[int(a):None if b is None else int(b)],
        }
    else:
        table = {
            "includes": lambda x, *a: any(strict_eq(e, x) for e in obj),
            "indexOf": lambda x, *a: next((k for k, e in enumerate(obj) if strict_eq(e, x)), -1),
            "some": lambda f, *a: any(truthy(f(e, k, obj)) for k, e in enumerate(obj)),
            "every": lambda f, *a: all(truthy(f(e, k, obj)) for k, e in enumerate(obj)),
            "map": lambda f, *a: [f(e, k, obj) for k, e in enumerate(obj)],
            "filter": lambda f, *a: [e for k, e in enumerate(obj) if truthy(f(e, k, obj))],
            "join": lambda sep=",", *a: sep.join(to_str(e) for e in obj),
            "slice": lambda a=0, b=None: obj[int(a):None if b is None else int(b)],
        }
    if name not in table:
        return UNDEF
    return table[name]


def call(f, args):
    if not callable(f):
        raise JSError("%s is not a function" % to_str(f))
    return f(*args)


def show(v):
    """console.log of v: strings as they are, numbers as JS prints them."""
    if isinstance(v, str):
        return v
    if isinstance(v, (list, dict)):
        return stringify(v)
    return to_str(v)


def evaluate(path, src):
    try:
        with open(path, encoding="utf-8") as f:
            o = json.load(f)
    except Exception:
        o = None
    env = {
        "o": o,
        "Array": {"isArray": lambda v, *a: isinstance(v, list)},
        "JSON": {"stringify": lambda v, *a: stringify(v), "parse": lambda s, *a: json.loads(s)},
        "parses": lambda s, *a: parses(s),
    }
    return Parser(src).parse()(env)


def sse_framing(path):
    with open(path, encoding="utf-8") as f:
        t = f.read()
    blocks = [b for b in t.split("\n\n") if b]
    bad = 0
    for b in blocks:
        m = re.fullmatch(r"event: (\S+)\ndata: (.*)", b)
        try:
            ok = m is not None and json.loads(m.group(2)).get("type") == m.group(1)
        except Exception:
            ok = False
        bad += not ok
    return "ok" if bad == 0 and "[DONE]" not in t and len(blocks) > 6 else "bad %d of %d" % (bad, len(blocks))


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    try:
        if cmd == "eval" and len(argv) == 4:
            print(show(evaluate(argv[2], argv[3])))
        elif cmd == "items" and len(argv) == 3:
            print(stringify({"input": [{} for _ in range(int(argv[2]))]}))
        elif cmd == "deep" and len(argv) == 3:
            v = "1"
            for _ in range(int(argv[2])):
                v = "[" + v + "]"
            print('{"input":"x","metadata":{"k":' + v + "}}")
        elif cmd == "content" and len(argv) == 3:
            print(stringify({"content": argv[2]}))
        elif cmd == "sse-framing" and len(argv) == 3:
            print(sse_framing(argv[2]))
        elif cmd == "anthropic-text" and len(argv) == 2:
            t = ""
            for line in sys.stdin:
                o = json.loads(line)
                if o.get("type") == "content_block_delta":
                    t += o["delta"]["text"]
            sys.stdout.write(t)
        elif cmd == "template" and len(argv) == 4:
            with open(argv[2], encoding="utf-8") as f:
                tpl = json.load(f)["chat_template"]
            with open(argv[3], "w", encoding="utf-8") as f:
                f.write(tpl)
        else:
            sys.stderr.write(__doc__)
            return 2
    except Exception as e:
        sys.stderr.write("jsexpr: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
