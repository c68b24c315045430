#!/usr/bin/env python3
"""The imports between the rooms of src/: which room names which (`crate::room`, `use
crate::{room, ...}`), test modules left out, and the circles among them (Tarjan's strongly
connected components). A room is src/ROOM.rs or src/ROOM/; with --split=event,control,engine
each file of those directories is a room of its own (event/reactor, control/conn, ...).

    scripts/imports.py [--split=event,control,engine] [SRC]

Prints one line per room with what it imports, then `circles: none` or each circle."""
import collections, os, re, sys

args = [a for a in sys.argv[1:] if not a.startswith('--split=')]
root = args[0] if args else 'src'
split = set()
for a in sys.argv[1:]:
    if a.startswith('--split='):
        split = set(x for x in a.split('=', 1)[1].split(',') if x)

def is_room(name):
    return os.path.isfile(os.path.join(root, name + '.rs')) or os.path.isdir(os.path.join(root, name))

def room_of_file(path):
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    if parts[0] in split and len(parts) > 1 and parts[1] != 'mod':
        return parts[0] + '/' + parts[1]
    return parts[0]

def target(a, b):
    if a in split and b and (os.path.isfile(os.path.join(root, a, b + '.rs')) or os.path.isdir(os.path.join(root, a, b))):
        return a + '/' + b
    return a

edges = collections.defaultdict(set)
for dp, _, fs in os.walk(root):
    for f in fs:
        if not f.endswith('.rs') or f == 'tests.rs':
            continue
        p = os.path.join(dp, f)
        src = open(p).read()
        src = re.sub(r'#\[cfg\(test\)\]\s*mod tests\s*\{.*', '', src, flags=re.S)
        src = re.sub(r'//[^\n]*', '', src)
        r = room_of_file(p)
        names = [(m.group(1), m.group(2)) for m in re.finditer(r'crate::(\w+)(?:::(\w+))?', src)]
        for m in re.finditer(r'use crate::\{([^}]*)\}', src):
            for item in m.group(1).split(','):
                bits = [x.strip() for x in item.strip().split('::')]
                if bits and bits[0]:
                    names.append((bits[0], bits[1] if len(bits) > 1 else None))
        for a, b in names:
            if not is_room(a):
                continue
            t = target(a, b)
            if t != r and t != r.split('/')[0]:
                edges[r].add(t)
            elif t == r.split('/')[0] and '/' in r and t != r:
                edges[r].add(t)

rooms = sorted(set(edges) | {t for v in edges.values() for t in v})
for r in rooms:
    if edges.get(r):
        print(f"{r:18} -> {', '.join(sorted(edges[r]))}")

sys.setrecursionlimit(10000)
index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
def visit(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))
for v in rooms:
    if v not in index:
        visit(v)
print('circles:', '; '.join('{' + ', '.join(c) + '}' for c in sccs) if sccs else 'none')
