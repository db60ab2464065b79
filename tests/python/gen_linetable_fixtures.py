"""Writes the line-table fixture of the running interpreter for
tests/preload/pylinetable_test.cc (preload/python/pylinetable.h).

    python3.X tests/python/gen_linetable_fixtures.py > tests/preload/data/pylinetable_3X.txt

A generated module with the shapes that stress a line table (a jump of more
than 127 lines forwards and backwards, lines above 255, statements spread
over several lines, instructions without a line, loops, comprehensions,
try/except, nested functions, lambdas, a generator) is compiled, and for every
code object in it the fixture holds its co_firstlineno, its co_linetable (hex)
and the interpreter's own answer, co_lines(): (start, end, line) in bytes,
line -1 for None. From 3.13 on it also holds the interpreter's published
_PyRuntime.debug_offsets (584 bytes in 3.13), for Layout313FromDebugOffsets. The unit test decodes the table at every instruction and
compares, so it runs without the interpreters that made the fixtures.
"""

import sys
import types


def source():
    gap = "\n" * 140
    return (
        "import os\n"
        "def simple(a):\n"
        "    b = a + 1\n"
        "    return b\n"
        + gap +
        "def far_loop(n):\n"
        "    total = 0\n"
        "    for i in range(n):\n"
        "        total += i\n" + gap +
        "        total -= 1\n"
        "    return (total +\n"
        "            n *\n"
        "            2)\n"
        "class Holder:\n"
        "    def method(self, xs):\n"
        "        return [x * 2 for x in xs if x]\n"
        "    def gen(self):\n"
        "        yield 1\n"
        "        yield from range(3)\n"
        "def tricky(d):\n"
        "    try:\n"
        "        v = d['k']\n"
        "    except KeyError:\n"
        "        v = None\n"
        "    finally:\n"
        "        d.clear()\n"
        "    f = lambda q: (q,\n"
        "                   q)\n"
        "    def inner():\n"
        "        return v\n"
        "    with open(os.devnull) as fh:\n"
        "        fh.read()\n"
        "    return f(inner())\n"
        + gap + gap +
        "x = simple(1); y = far_loop(3)\n"
        "z = {k: v for k, v in\n"
        "     zip('ab', 'cd')}\n")


def walk(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from walk(c)


def main():
    top = compile(source(), "<fixture>", "exec")
    print("# co_lines() of CPython %s, written by tests/python/gen_linetable_fixtures.py"
          % sys.version.split()[0])
    print("version %d.%d" % sys.version_info[:2])
    if sys.version_info >= (3, 13):
        import ctypes
        runtime = ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime")
        print("debug_offsets %s" % ctypes.string_at(ctypes.addressof(runtime), 584).hex())
    for code in walk(top):
        print("code %s %d %s" % (code.co_name.replace(" ", "_"), code.co_firstlineno,
                                 code.co_linetable.hex()))
        for start, end, line in code.co_lines():
            print("range %d %d %d" % (start, end, -1 if line is None else line))


if __name__ == "__main__":
    main()
