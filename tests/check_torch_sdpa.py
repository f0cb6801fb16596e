#!/usr/bin/env python3
"""Checks tools/halbench/torch_sdpa.py (the script path is the first argument)
on decode / chunked-prefill shapes (--seq-q):

- its FLOP count for a causal mask with seq_q != seq_kv is bottom-right
  aligned (hand-computed cases), as halbench attn counts it;
- a bad --seq-q value exits 2 with a message naming it;
- with --seq-q 1,16 --seq 32 --causal it prints one row per (seq_q, seq_kv)
  pair with seq_q in each row and the bottom-right FLOPs, and says in the
  row's note that an explicit mask stands in for is_causal. Where torch is
  not importable the document must say so instead (results empty).

Exits 0 when every check passes, 1 otherwise.
"""

import contextlib
import importlib.util
import io
import json
import sys


def load(path):
    spec = importlib.util.spec_from_file_location("torch_sdpa", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(module, argv):
    """main(argv) -> (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = module.main(argv)
        except SystemExit as exit:
            status = exit.code
    return status, out.getvalue(), err.getvalue()


def main(argv):
    module = load(argv[1])
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    # Visible pairs of one head, by hand: query i sees i + seq_kv - seq_q + 1 keys.
    check(module.visible_pairs(1, 32, True) == 32, "decode sees every key")
    check(module.visible_pairs(16, 32, True) == 392, "(16, 32) causal: 17 + ... + 32 = 392 pairs")
    check(module.visible_pairs(4, 4, True) == 10, "(4, 4) causal: 1 + 2 + 3 + 4")
    check(module.visible_pairs(4, 2, True) == 0 + 0 + 1 + 2, "(4, 2) causal: the first two queries see nothing")
    check(module.visible_pairs(16, 32, False) == 512, "(16, 32) without a mask: 16 x 32")

    # A bad --seq-q value: exit 2 and the value named.
    status, _, errors = run(module, ["--seq-q", "1,abc"])
    check(status == 2, f"--seq-q 1,abc exits 2 (got {status})")
    check("--seq-q" in errors and "'abc'" in errors, f"--seq-q 1,abc names the value: {errors!r}")
    status, _, errors = run(module, ["--seq-q", "0"])
    check(status == 2 and "0 is too small" in errors, f"--seq-q 0 exits 2 naming it: {status} {errors!r}")

    # The measured document: 4 heads, head dim 16 -> forward 2 x 4 x pairs x 32.
    status, output, errors = run(module, ["--seq-q", "1,16", "--seq", "32", "--heads-q", "4", "--heads-kv", "2",
                                          "--head-dim", "16", "--causal", "--iters", "1", "--threads", "1",
                                          "--json"])
    check(status == 0, f"the run exits 0 (got {status}): {errors}")
    document = json.loads(output)
    check(document["schema"] == "hal.bench/1", "schema hal.bench/1")
    check(document["parameters"]["seq_q"] == [1, 16], "parameters.seq_q")
    rows = document["results"]
    if document["environment"]["torch_version"] is None:
        check(rows == [] and "torch is not importable" in document["skipped"][0]["reason"],
              "without torch: no rows, and the reason")
        print("check_torch_sdpa.py: torch is not importable here; checked the FLOP count, the usage errors and "
              "the document without torch")
    else:
        check([(row["seq_q"], row["seq"]) for row in rows] == [(1, 32), (16, 32)], f"one row per pair: {rows}")
        expected = {1: 2 * 4 * 32 * 32, 16: 2 * 4 * 392 * 32}
        for row in rows:
            check(row["flops"] == expected[row["seq_q"]], f"flops of seq_q {row['seq_q']}: {row['flops']}")
            check(row["ms_per_call"] > 0, "a positive time")
            check("bottom-right" in row["note"] and "attn_mask" in row["note"], f"the mask note: {row['note']!r}")
    for failure in failures:
        print(f"check_torch_sdpa.py: FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
