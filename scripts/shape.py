#!/usr/bin/env python3
"""The house's shape, checked: no function in src/ over 120 lines, no glob import of a crate
room (`use crate::room::*`; `use super::*` in a test module is fine), src/event/ at most 25 %
of src/'s lines, and no circle among the rooms (scripts/imports.py
--split=event,control,engine). Prints each breach; exits 1 when there is one.

    scripts/shape.py [--list N]   (--list N: also print every function over N lines)

Function spans are found by brace matching over the source with strings, chars and comments
blanked, from a line holding `fn name` to the brace that closes its body; a test module
(`#[cfg(test)] mod tests { ... }`) and files named tests.rs are left out."""
import os, re, subprocess, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
SRC = os.path.join(ROOT, 'src')
LIMIT = 120
listing = None
if '--list' in sys.argv:
    listing = int(sys.argv[sys.argv.index('--list') + 1])


def blank(src):
    """Source with comments, strings and char literals turned to spaces (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == 'r' and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == '_')):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            if m:
                out.append(' ' * len(m.group(0))); i += len(m.group(0))
            else:
                out.append(c); i += 1
        else:
            out.append(c); i += 1
    return ''.join(out)


def strip_tests(text):
    m = re.search(r'#\[cfg\(test\)\]\s*mod tests\s*\{', text)
    return text[:m.start()] if m else text


def functions(path):
    text = strip_tests(blank(open(path).read()))
    lines = text.split('\n')
    for m in re.finditer(r'\bfn\s+(\w+)', text):
        start_line = text.count('\n', 0, m.start()) + 1
        j = m.end()
        depth = 0
        # the body's opening brace: the first `{` at paren depth 0 before a `;`
        while j < len(text):
            ch = text[j]
            if ch in '(<[':
                depth += 1
            elif ch in ')>]':
                depth -= 1
            elif ch == ';' and depth <= 0:
                j = -1; break
            elif ch == '{' and depth <= 0:
                break
            j += 1
        if j < 0 or j >= len(text):
            continue
        level, k = 0, j
        while k < len(text):
            if text[k] == '{':
                level += 1
            elif text[k] == '}':
                level -= 1
                if level == 0:
                    break
            k += 1
        end_line = text.count('\n', 0, k) + 1
        yield m.group(1), start_line, end_line - start_line + 1


breaches = []
total = event = 0
for dp, _, fs in os.walk(SRC):
    for f in sorted(fs):
        if not f.endswith('.rs'):
            continue
        p = os.path.join(dp, f)
        rel = os.path.relpath(p, SRC)
        n = open(p).read().count('\n')
        total += n
        if rel.startswith('event' + os.sep):
            event += n
        if f == 'tests.rs':
            continue
        for name, line, length in functions(p):
            if length > LIMIT:
                breaches.append(f'src/{rel}:{line}: fn {name} is {length} lines (over {LIMIT})')
            elif listing is not None and length > listing:
                print(f'src/{rel}:{line}: fn {name} is {length} lines')
        for i, l in enumerate(strip_tests(open(p).read()).split('\n'), 1):
            if re.match(r'\s*(pub(\([\w:]+\))?\s+)?use\s+crate::[\w:]*\*\s*;', l) or re.match(r'\s*(pub(\([\w:]+\))?\s+)?use\s+crate::[\w:]*\{[^}]*\*', l):
                breaches.append(f'src/{rel}:{i}: glob import of a crate room: {l.strip()}')

share = 100.0 * event / total
print(f'src/event/: {event} of {total} lines ({share:.1f} %)')
if share > 25.0:
    breaches.append(f'src/event/ is {share:.1f} % of src/ (over 25 %)')
out = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'imports.py'),
                      '--split=event,control,engine', SRC], capture_output=True, text=True).stdout
circles = [l for l in out.splitlines() if l.startswith('circles:')]
if not circles or circles[0] != 'circles: none':
    breaches.append(f'imports.py --split=event,control,engine: {circles[0] if circles else "no verdict"}')
for b in breaches:
    print(b)
print('shape: ok' if not breaches else f'shape: {len(breaches)} breaches')
sys.exit(1 if breaches else 0)
