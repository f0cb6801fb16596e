#!/usr/bin/env python3
"""Speaks torch_sdpa.py's --serve protocol without torch, for the test of
`halbench attn --compare-torch`: every call "takes" FAKE_TORCH_MS
milliseconds of wall time and half that of CPU time (a comma list: its
values in turn, call by call), and each request is appended to the file
FAKE_TORCH_LOG (one case number per line). It takes
torch_sdpa.py's arguments and builds its cases the same way."""

import importlib.util
import itertools
import json
import os
import sys

spec = importlib.util.spec_from_file_location("torch_sdpa", os.environ["TORCH_SDPA_SCRIPT"])
torch_sdpa = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_sdpa)

arguments = torch_sdpa.parse_arguments(sys.argv[1:])
assert arguments.serve, "the fake serves only"
times = itertools.cycle([float(ms) / 1e3 for ms in os.environ.get("FAKE_TORCH_MS", "4").split(",")])
doc = torch_sdpa.document(arguments, [], [], "0-fake", arguments.threads, "FAKE")
directions = ["forward", "backward"] if arguments.backward else ["forward"]
doc["cases"] = [{"seq": seq_kv, "seq_q": seq_q, "direction": direction, "note": "fake torch", "flops": 0}
                for seq_q, seq_kv in torch_sdpa.shapes(arguments) for direction in directions]
doc["environment"]["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
print(json.dumps(doc), flush=True)
with open(os.environ["FAKE_TORCH_LOG"], "a") as log:
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        log.write(line)
        log.flush()
        seconds = next(times)
        print(f"{seconds:.9f} {seconds / 2:.9f}", flush=True)
