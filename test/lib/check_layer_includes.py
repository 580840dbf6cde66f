#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# The layering, as the build enforces it: every library source is compiled with the include
# folders of its own layer and of the layers below it only (docs/design.md, "Layers"), so a
# header that crosses the layering does not compile. Reads the build's compile_commands.json;
# fails on any project include folder a layer may not see, naming the file and the folder.
# A second check compiles one probe per rule with the layer's own flags and expects it to fail.
import json
import os
import shlex
import subprocess
import sys
import tempfile

build = os.path.abspath(sys.argv[1])
source = os.path.abspath(sys.argv[2])

# Layer (folder of its sources) -> project folders its files may have on the include path.
# A layer always sees its own folder (the build's implicit include of the target's folder).
ALLOWED = {
    'status': ['status/include'],
    'wqe': ['wqe/include', 'status/include'],
    'doorbell': ['doorbell/include', 'wqe/include', 'status/include'],
    'hw/src': ['hw/include', 'status/include', 'hw/mlx5/include'],
    'hw/mlx5': ['hw/mlx5/include', 'hw/mlx5/src', 'hw/include', 'status/include'],
    'hw/sim': ['hw/sim/include', 'hw/sim/src', 'hw/include', 'doorbell/include', 'wqe/include',
               'status/include'],
    'drv': ['drv/include', 'drv/src', 'doorbell/include', 'wqe/include', 'status/include',
            'hw/include'],
}
# librnicdv-dpdk's files (hw/sim/src/wire/dpdk_*.cc) count as the simulator's layer.
# Library layers only: the shim, the tools and the tests reach private headers on purpose.
SKIP = ('hw/uverbs', 'test', 'tools')

def layer_of(rel):
    best = None
    for layer in ALLOWED:
        if rel == layer or rel.startswith(layer + '/'):
            if best is None or len(layer) > len(best):
                best = layer
    return best

def includes(cmd, directory):
    args = shlex.split(cmd)
    out = []
    for i, a in enumerate(args):
        path = None
        if a.startswith('-I') and len(a) > 2:
            path = a[2:]
        elif a in ('-I', '-isystem') and i + 1 < len(args):
            path = args[i + 1]
        if path is None:
            continue
        out.append(os.path.normpath(os.path.join(directory, path)))
    return out

def project_rel(path):
    """A folder of the source or build tree, relative to its root; None outside both."""
    for root in (build, source):
        if path == root:
            return '.'
        if path.startswith(root + '/'):
            return os.path.relpath(path, root)
    return None

commands = json.load(open(os.path.join(build, 'compile_commands.json')))
bad = []
checked = 0
for c in commands:
    src = os.path.normpath(os.path.join(c['directory'], c['file']))
    if not src.startswith(source + '/'):
        continue
    rel = os.path.relpath(src, source)
    if rel.startswith(SKIP):
        continue
    layer = layer_of(rel)
    if layer is None:
        continue
    checked += 1
    allowed = ALLOWED[layer] + [layer]
    for inc in includes(c['command'], c['directory']):
        r = project_rel(inc)
        if r is None:
            continue  # system and dependency headers
        if r.endswith('.p'):
            continue  # the build's private folder of the target (its objects, no headers)
        if any(r == a or r.startswith(a + '/') for a in allowed):
            continue
        bad.append(f'{rel} ({layer}): include folder {r} is not of its layer or below')

if checked == 0:
    print('no library sources in compile_commands.json', file=sys.stderr)
    sys.exit(1)
for b in sorted(set(bad)):
    print(b)

# Probes: each must fail to compile with the flags of a file of the named layer.
PROBES = [
    ('drv/src/qp_post.cc', '#include "hca.h"', 'drv cannot see the simulator'),
    ('drv/src/qp_post.cc', '#include "rnicdv/hw/mlx5.h"', 'drv cannot see a backend'),
    ('hw/sim/src/engine.cc', '#include "rnicdv/qp.h"', 'the simulator cannot see drv'),
    ('hw/sim/src/engine.cc', '#include "rnicdv/hw/mlx5.h"', 'nor the real-device backend'),
    ('wqe/src/decode.cc', '#include "rnicdv/hw/device.h"', 'wqe cannot see hw'),
    ('doorbell/src/send_doorbell.cc', '#include "rnicdv/hw/device.h"', 'doorbell knows no device'),
]
by_file = {os.path.relpath(os.path.normpath(os.path.join(c['directory'], c['file'])), source): c
           for c in commands}
failed_probes = []
for file, line, why in PROBES:
    c = by_file.get(file)
    if c is None:
        failed_probes.append(f'{file}: not in compile_commands.json')
        continue
    args = shlex.split(c['command'])
    # Keep the compiler and the preprocessor flags; compile the probe instead of the file.
    keep = [args[0]] + [a for i, a in enumerate(args[1:], 1)
                        if a.startswith(('-I', '-D', '-std', '-isystem')) or
                        (args[i - 1] in ('-isystem', '-I'))]
    with tempfile.NamedTemporaryFile('w', suffix='.cc', delete=False) as f:
        f.write(line + '\n')
        probe = f.name
    try:
        r = subprocess.run(keep + ['-fsyntax-only', probe], cwd=c['directory'],
                           capture_output=True, text=True)
    finally:
        os.unlink(probe)
    if r.returncode == 0:
        failed_probes.append(f'{file}: `{line}` compiles, but {why}')
for p in failed_probes:
    print(p)
print(f'{checked} library sources checked, {len(PROBES)} probes')
sys.exit(1 if bad or failed_probes else 0)
