#!/usr/bin/env python3
"""Checks `halbench attn --compare-torch` and `--sweep` (halbench's path is the first
argument, torch_sdpa.py's the second, the fake peer's the third): with a peer
whose calls take 4 ms, every row's torch ms is 4, its torch/hal is the median
of 4 / hal ms over the pairs (inside the reported range, which holds 4 /
hal's fastest call), the peer got exactly one call per timed hal call plus
one warm-up per row, in hal's order (ABAB...), and its threads were told
to sleep between calls; the sweep covers every shape class and computes its
goals from its cells, and takes more pairs exactly where 1.0 lies within a
cell's median interval. Exits 0 when every check passes, 1 otherwise."""

import json
import math
import os
import subprocess
import sys
import tempfile


def median_interval(samples):
    """The reference: the order statistics x_k, x_(n+1-k) with P(Binomial(n, 1/2) < k) <= 2.5%, k largest (1 when
    none qualifies: the range)."""
    ordered, n = sorted(samples), len(samples)
    k = 1
    while k < n // 2 and sum(math.comb(n, j) for j in range(k + 1)) / 2 ** n <= 0.025:
        k += 1
    return [ordered[k - 1], ordered[n - k]]


def main(argv):
    halbench, torch_sdpa, fake = argv[1:4]
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    with tempfile.TemporaryDirectory() as directory:
        log = os.path.join(directory, "calls")
        env = dict(os.environ, TORCH_SDPA_SCRIPT=torch_sdpa, FAKE_TORCH_LOG=log, FAKE_TORCH_MS="4",
                   HAL_BACKENDS="host", HAL_CONFIG="")
        env.pop("OMP_WAIT_POLICY", None)
        iterations = 3
        command = [halbench, "attn", "--impl", "flash,math", "--seq", "16,32", "--heads-q", "2", "--heads-kv", "1",
                   "--head-dim", "16", "--backward", "--iters", str(iterations), "--json", "--compare-torch",
                   "--python", sys.executable, "--torch-script", fake]
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        check(result.returncode == 0, f"halbench exits 0 (got {result.returncode}): {result.stderr}")
        document = json.loads(result.stdout)
        rows = document["results"]
        check(len(rows) == 8, f"2 shapes x 2 directions x 2 implementations: {len(rows)} rows")
        for row in rows:
            what = f"{row['implementation']} {row['direction']} seq {row['seq']}"
            check(abs(row["torch_ms_per_call"] - 4.0) < 1e-6, f"{what}: torch ms {row['torch_ms_per_call']} is 4")
            low, high = row["torch_over_hal_range"]
            check(low <= row["torch_over_hal"] <= high, f"{what}: the median ratio lies in its range")
            check(abs(high - 4.0 / row["min_ms_per_call"]) < 1e-6 * high,
                  f"{what}: the highest ratio {high} is 4 ms / hal's fastest call {row['min_ms_per_call']}")
            check(row["torch_note"] == "fake torch", f"{what}: the peer's note")
        check(document["torch"]["environment"]["omp_wait_policy"] == "PASSIVE",
              "torch's OpenMP threads sleep between calls")
        with open(log) as calls:
            requested = [int(line) for line in calls]
        # Cases: (16, forward) 0, (16, backward) 1, (32, forward) 2, (32, backward) 3; per row one warm-up
        # and one call per timed hal call; flash then math for each.
        expected = [case for case in (0, 0, 1, 1, 2, 2, 3, 3) for _ in range(1 + iterations)]
        check(requested == expected, f"the peer's calls in hal's order: {requested}")

        # --sweep: every (dtype, head dim, mask), prefill forward and backward and decode/chunk forward, against
        # the same peer; its goals computed from its cells.
        sweep = [halbench, "attn", "--sweep", "--seq", "16,32", "--heads-q", "2", "--heads-kv", "1", "--iters", "2",
                 "--json", "--python", sys.executable, "--torch-script", fake]
        result = subprocess.run(sweep, env=env, capture_output=True, text=True, timeout=300)
        check(result.returncode == 0, f"the sweep exits 0 (got {result.returncode}): {result.stderr}")
        document = json.loads(result.stdout)
        cells = document["results"]
        configs = {(c["dtype"], c["head_dim"], c["causal"]) for c in cells}
        check(configs == {(d, h, m) for d in ("f32", "bf16") for h in (64, 128) for m in (True, False)},
              f"every dtype, head dim and mask: {sorted(configs)}")
        shapes = sorted({(c["direction"], c["seq_q"], c["seq"]) for c in cells})
        check(shapes == sorted([("forward", 16, 16), ("forward", 32, 32), ("backward", 16, 16), ("backward", 32, 32),
                                ("forward", 1, 16), ("forward", 1, 32), ("forward", 16, 32)]),
              f"prefill both ways, decode and chunk forward (a chunk as long as its keys is prefill): {shapes}")
        check(len(cells) == 8 * 7, f"8 configurations x 7 cells: {len(cells)}")
        check(all(abs(c["torch_ms_per_call"] - 4.0) < 1e-6 for c in cells), "every cell paired with the peer")
        ratios = sorted(c["torch_over_hal"] for c in cells)
        goals = document["goals"]
        check(goals["every_cell"]["value"] == ratios[0], f"the every-cell goal reads the worst cell: {goals}")
        middle = (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
        check(abs(goals["median_cell"]["value"] - middle) < 1e-9 * middle, f"the median goal: {goals}")
        short = min(c["torch_over_hal"] for c in cells if c["seq_q"] == c["seq"])
        check(goals["short_prefill"]["value"] == short, f"the short-prefill goal reads the prefill cells: {goals}")
        for c in cells:
            low, high = c["torch_over_hal_interval95"]
            check(c["torch_over_hal_range"][0] <= low <= c["torch_over_hal"] <= high <= c["torch_over_hal_range"][1],
                  f"the median's interval lies within the range and holds the median: {c}")
        check(all(c["pairs"] == 2 and c["torch_over_hal_interval95"][0] > 1 for c in cells),
              "a peer 4 ms slower settles every cell above 1.0 with the planned pairs")

        # A peer whose calls alternate far faster and far slower than hal's never settles: every cell takes
        # pairs up to --max-pairs (3, then 4 at a time), and the peer gets one call a pair plus one warm-up a cell.
        os.remove(log)
        env["FAKE_TORCH_MS"] = "0.0001,50"
        unsettled = sweep[:]
        unsettled[unsettled.index("16,32")] = "16"
        unsettled[unsettled.index("--iters") + 1] = "3"
        result = subprocess.run(unsettled + ["--max-pairs", "11"], env=env, capture_output=True, text=True,
                                timeout=300)
        check(result.returncode == 0, f"the unsettled sweep exits 0 (got {result.returncode}): {result.stderr}")
        cells = json.loads(result.stdout)["results"]
        check(all(c["pairs"] == 11 and c["iterations"] == 11 and len(c["torch_over_hal_pairs"]) == 11 for c in cells),
              f"every cell took 11 pairs: {[c['pairs'] for c in cells]}")
        for c in cells:
            check(c["torch_over_hal_interval95"] == median_interval(c["torch_over_hal_pairs"]),
                  f"the interval of 11 pairs is their 2nd and 10th: {c}")
        check(all(c["torch_over_hal_interval95"][0] < 1 < c["torch_over_hal_interval95"][1] for c in cells),
              "each interval still holds 1.0")
        with open(log) as calls:
            check(len(calls.readlines()) == len(cells) * (1 + 11), "the peer's calls: a warm-up and 11 a cell")

        # A peer that dies is an error that says so, not a hang or a crash.
        env["FAKE_TORCH_MS"] = "not-a-number"
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        check(result.returncode != 0 and "torch_sdpa.py" in result.stderr and "stopped" in result.stderr,
              f"a dying peer is reported: {result.returncode} {result.stderr[-400:]!r}")

    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
