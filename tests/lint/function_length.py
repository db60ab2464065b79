#!/usr/bin/env python3
"""Fails when a function in src/, tools/ or preload/ is longer than the limit.

Issue 13: "short functions with one job". A function longer than about 80
lines does more than one thing; split it into named steps that read as the
algorithm. The length counts every line from the first line of the
function's declaration to its closing brace, comments and blank lines
included (what a reader has to hold in their head).

The scan is lexical (no compiler): comments, string and character literals
(raw strings too) and preprocessor lines are blanked, then braces are
matched. A brace opens a function body when the text since the previous
';', '{' or '}' at the same level has a parameter list and is not a
namespace, a class, an initializer or a control statement; everything
nested in it (lambdas, local classes) counts toward that function.

Usage: function_length.py [--limit N] ROOT   (checks ROOT/{src,tools,preload})
       function_length.py [--limit N] --files FILE...   (no allow-list)
Exit 0 when every function fits, 1 otherwise (one line per long function:
"LINES path:line Name").
"""

import argparse
import fnmatch
import os
import re
import sys

LIMIT = 80

# Functions allowed over the limit while a split is in progress, each named:
# none today. An entry is "path" (a glob: the whole file) or
# "path:Function". Empty this list, never grow it.
ALLOW = []

ROOTS = ("src", "tools", "preload")
EXTENSIONS = (".cc", ".h", ".c")

def strip(src):
    # Blank out comments, string/char literals and preprocessor lines, keeping newlines.
    out = []; i = 0; n = len(src); line_start = True
    while i < n:
        c = src[i]
        if line_start and c in ' \t':
            out.append(c); i += 1; continue
        if line_start and c == '#':
            # preprocessor line with continuations
            while i < n:
                if src[i] == '\\' and i + 1 < n and src[i+1] == '\n':
                    out.append(' \n'); i += 2; continue
                if src[i] == '\n': break
                out.append(' '); i += 1
            continue
        line_start = False
        if src.startswith('//', i):
            j = src.find('\n', i); j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j; continue
        if src.startswith('/*', i):
            j = src.find('*/', i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j; continue
        m = re.match(r'R"([^(\s]*)\(', src[i:i+20]) if c == 'R' and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')) else None
        if m:
            end = ')' + m.group(1) + '"'
            j = src.find(end, i + m.end()); j = n if j < 0 else j + len(end)
            out.append('""' + re.sub(r'[^\n]', ' ', src[i+2:j])); i = j; continue
        if c == '"' or (c == "'" and not (i > 0 and src[i-1].isalnum())):
            j = i + 1
            while j < n and src[j] != c and src[j] != '\n':
                j += 2 if src[j] == '\\' else 1
            out.append(c + ' ' * (j - i - 1) + c); i = j + 1; continue
        if c == '\n': line_start = True
        out.append(c); i += 1
    return ''.join(out)

def functions(src):
    s = strip(src)
    stack = []  # kinds
    header_start = 0  # index after last ; { } at non-function level
    res = []
    i = 0; n = len(s)
    func_depth = None; func_start = None; func_name = None
    while i < n:
        c = s[i]
        if func_depth is not None:
            if c == '{': stack.append('inner')
            elif c == '}':
                stack.pop()
                if len(stack) == func_depth:
                    start_line = s.count('\n', 0, func_start) + 1
                    end_line = s.count('\n', 0, i) + 1
                    res.append((func_name, start_line, end_line - start_line + 1))
                    func_depth = None; header_start = i + 1
            i += 1; continue
        if c in ';':
            header_start = i + 1
        elif c == '{':
            head = s[header_start:i]
            kind = classify(head)
            if kind == 'function':
                func_depth = len(stack)
                # start at first non-space char of the header
                k = header_start
                while k < i and s[k].isspace(): k += 1
                func_start = k
                func_name = name_of(head)
                stack.append('function')
            else:
                stack.append(kind); header_start = i + 1
        elif c == '}':
            if stack: stack.pop()
            header_start = i + 1
        elif c == ':' and s[i-1:i+1] != '::' and s[i:i+2] != '::':
            # access specifiers: public: etc. reset header
            if re.search(r'\b(public|private|protected)\s*$', s[header_start:i]):
                header_start = i + 1
        i += 1
    return res

def classify(head):
    h = ' '.join(head.split())
    if re.search(r'\bnamespace\b', h) or re.match(r'^extern\s*"', h): return 'namespace'
    # strip parenthesised parts to look at the top level
    top = re.sub(r'\([^()]*\)', '()', h)
    while re.search(r'\([^()]*\([^()]*\)', top):
        top = re.sub(r'\([^()]*\)', '', top)
    if re.search(r'\b(class|struct|union|enum)\b', top.split('(')[0]) and not re.search(r'\)\s*(const)?\s*$', h): return 'class'
    if '(' in h and ')' in h:
        before = h.split('(')[0]
        if re.search(r'(?<![=!<>])=(?!=)', before) and 'operator' not in before: return 'other'
        if re.search(r'\b(return|if|while|for|switch)\b', before): return 'other'
        return 'function'
    return 'other'

def name_of(head):
    h = ' '.join(head.split())
    m = re.search(r'([~\w:]+(?:operator\s*\S+?)?)\s*\(', h)
    return m.group(1) if m else h[:40]


def allowed(path, name):
    for entry in ALLOW:
        file_glob, _, function = entry.partition(":")
        if fnmatch.fnmatch(path, file_glob) and function in ("", name):
            return True
    return False


def sources(root):
    for top in ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(EXTENSIONS):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=LIMIT)
    ap.add_argument("--files", action="store_true", help="check the given files, no allow-list")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    if args.files:
        checks = [(p, p, False) for p in args.paths]
    else:
        root = args.paths[0]
        checks = [(os.path.join(root, p), p, True) for p in sources(root)]
    if not checks:
        print("function_length: no sources found", file=sys.stderr)
        return 1
    long_ones = 0
    scanned = 0
    for full, rel, use_allow in checks:
        with open(full, encoding="utf-8", errors="replace") as f:
            found = functions(f.read())
        scanned += len(found)
        for name, line, length in found:
            if length <= args.limit:
                continue
            if use_allow and allowed(rel, name.split("::")[-1]):
                print(f"allowed: {length:5d} {rel}:{line} {name}")
                continue
            print(f"{length:5d} {rel}:{line} {name}")
            long_ones += 1
    print(f"function_length: {scanned} functions in {len(checks)} files, "
          f"{long_ones} over {args.limit} lines")
    return 1 if long_ones else 0


if __name__ == "__main__":
    sys.exit(main())
