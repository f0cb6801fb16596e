"""python -m hal.bench attention at a small shape: it runs, its figures are measurements, and bad flags are refused."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")


def bench(*args):
    return subprocess.run([sys.executable, "-m", "hal.bench", "attention", *args], capture_output=True, text=True,
                          timeout=300)


def test_attention_benchmark_reports_both_engines_and_the_overhead():
    result = bench("--seq", "24", "40", "--heads", "4", "--kv-heads", "2", "--head-dim", "64", "--repeats", "2",
                   "--overhead-calls", "300", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [row["seq"] for row in report["rows"]] == [24, 40]
    for row in report["rows"]:
        for name in ("torch", "hal"):
            assert row[f"{name}_forward_ms"] > 0 and row[f"{name}_fwd_bwd_ms"] > 0
        for part in ("forward", "fwd_bwd"):  # the median of the turns' ratios, inside their range
            ratios = row[f"hal_vs_torch_{part}_ratios"]
            assert len(ratios) == 2 and row[f"hal_vs_torch_{part}"] == pytest.approx(sum(ratios) / 2)
            assert row[f"hal_vs_torch_{part}_range"] == [min(ratios), max(ratios)]
    overhead = report["overhead"]
    # Every path is timed and the goal is computed from the figures; which is
    # faster on a loaded machine is the benchmark's finding, not a test's.
    assert overhead["cpp_us"] > 0 and overhead["hal_torch_us"] > 0 and overhead["hal_python_us"] > 0
    assert overhead["overhead_us"] == pytest.approx(overhead["hal_torch_us"] - overhead["cpp_us"])
    assert overhead["torch_custom_op_floor_us"] > 0
    assert overhead["goal_us"] == pytest.approx(overhead["torch_custom_op_floor_us"] + overhead["cpp_us"] + 10)
    assert overhead["goal_met"] == (overhead["hal_torch_us"] <= overhead["goal_us"])


def test_table_output():
    result = bench("--seq", "16", "--heads", "2", "--kv-heads", "1", "--head-dim", "64", "--repeats", "1",
                   "--no-backward", "--overhead-calls", "20")
    assert result.returncode == 0, result.stderr
    assert "ratio = torch time / hal time" in result.stdout
    assert "overhead of the Python path" in result.stdout


def test_overhead_alone_prints_the_goal():
    result = bench("--overhead", "--overhead-calls", "40")
    assert result.returncode == 0, result.stderr
    assert "ratio" not in result.stdout  # no sequence rows
    assert "(floor + C++ call + 10 us)" in result.stdout


def test_transformers_layer_rows_time_sdpa_and_hal_and_the_mask_check():
    pytest.importorskip("transformers")
    result = bench("--transformers", "--seq", "32", "--heads", "2", "--kv-heads", "1", "--head-dim", "32",
                   "--repeats", "2", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["rows"]
    assert row["seq"] == 32 and row["batch"] == 2
    assert row["sdpa_ms"] > 0 and row["hal_ms"] > 0 and row["mask_check_ms"] > 0 and row["masked_attention_ms"] > 0
    assert row["hal_vs_sdpa_range"][0] <= row["hal_vs_sdpa"] <= row["hal_vs_sdpa_range"][1]
    assert row["goal_met"] == (row["hal_vs_sdpa"] >= row["goal"])
    assert row["mask_check_share"] == pytest.approx(row["mask_check_ms"] / row["masked_attention_ms"])


@pytest.mark.parametrize("args, message", [
    (["--kv-heads", "3"], "--kv-heads 3 does not divide --heads 32"),
    (["--seq", "0"], "every length must be >= 1"),
    (["--repeats", "0"], "--repeats is 0"),
])
def test_bad_flags_are_refused(args, message):
    result = bench(*args)
    assert result.returncode == 2
    assert message in result.stderr


def collectives(*args):
    return subprocess.run([sys.executable, "-m", "hal.bench", "collectives", *args], capture_output=True, text=True,
                          timeout=300)


def test_collectives_benchmark_measures_hal_and_gloo_in_one_run():
    result = collectives("--launcher", "local", "-b", "8", "-e", "4K", "-f", "16", "--rounds", "1",
                         "--ddp-steps", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "hal.bench.collectives/1" and report["world_size"] == 2
    assert "gloo" in report["engine"]  # launched without mpirun: hal's Gloo engine, named
    assert [row["bytes"] for row in report["rows"]] == [8, 128, 2048, 4096]
    for row in report["rows"]:
        assert row["hal_us"] > 0 and row["gloo_us"] > 0
        assert row["hal_over_gloo_time"] == pytest.approx(row["hal_us"] / row["gloo_us"])
    assert set(report["ddp_step_seconds"]) >= {"hal", "gloo"}
    assert report["summary"]["small_time_ratio_max"] == max(r["hal_over_gloo_time"] for r in report["rows"])


def test_collectives_benchmark_refuses_bad_sizes():
    result = collectives("-b", "1M", "-e", "1K")
    assert result.returncode == 2 and "max >= min" in result.stderr


def test_sweep_measures_every_cell_writes_the_heat_map_and_judges_the_goals(tmp_path):
    svg = tmp_path / "sweep.svg"
    result = bench("--sweep", "--seq", "16", "32", "--heads", "2", "--kv-heads", "1", "--head-dims", "32",
                   "--dtypes", "float32", "--decode-q", "1", "--repeats", "2", "--max-repeats", "2", "--svg", str(svg),
                   "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    cells = report["cells"]
    # 2 masks x (2 prefill lengths x 2 passes + 2 decode cells, forward only)
    assert len(cells) == 12
    assert sum(cell["kind"] == "decode" for cell in cells) == 4
    assert not any(cell["backward"] for cell in cells if cell["kind"] == "decode")
    for cell in cells:
        assert cell["torch_ms"] > 0 and cell["hal_ms"] > 0, cell
        assert len(cell["ratios"]) == 2 and cell["ratio"] == pytest.approx(sum(cell["ratios"]) / 2)
        assert cell["ratio_range"] == [min(cell["ratios"]), max(cell["ratios"])]
        assert cell["ratio_interval"] == cell["ratio_range"]  # two turns: no narrower 95% interval exists
    ratios = sorted(cell["ratio"] for cell in cells)
    every, median, short = report["goals"]
    assert every["value"] == pytest.approx(ratios[0]) and every["met"] == (ratios[0] >= 1.0)
    assert median["value"] == pytest.approx((ratios[5] + ratios[6]) / 2) and median["met"] == (median["value"] >= 1.3)
    short_ratios = [cell["ratio"] for cell in cells if cell["backward"]]
    assert short["value"] == pytest.approx(min(short_ratios))
    text = svg.read_text()
    assert text.startswith("<svg") and text.count("<rect") == 12
    for cell in cells:  # every ratio is written in its square
        assert f">{cell['ratio']:.2f}</text>" in text


def test_sweep_skips_a_cell_estimated_past_the_limit():
    result = bench("--sweep", "--seq", "16", "256", "--heads", "2", "--kv-heads", "1", "--head-dims", "32",
                   "--dtypes", "float32", "--decode-q", "--repeats", "1", "--max-cell-seconds", "1e-9", "--svg",
                   "/dev/null", "--json")
    assert result.returncode == 0, result.stderr
    cells = json.loads(result.stdout)["cells"]
    # the first cell of each (dtype, pass) sets the FLOP rate; every later, larger one is estimated past 1 ns
    skipped = [cell for cell in cells if "skipped" in cell]
    assert skipped and all("--max-cell-seconds" in cell["skipped"] for cell in skipped)
    assert all("ratio" in cell for cell in cells if cell["seq_kv"] == 16 and cell["causal"])


def test_the_median_interval_is_the_distribution_free_95_percent_one():
    from hal.bench import _median_interval
    # below six samples: the range; then the standard ranks (n=10: 2nd and 9th, n=20: 6th and 15th, n=41: 14th, 28th)
    for n, low, high in [(1, 1, 1), (5, 1, 5), (6, 1, 6), (10, 2, 9), (20, 6, 15), (41, 14, 28)]:
        samples = list(range(n, 0, -1))  # n..1: the interval of 1..n read off unsorted samples
        assert _median_interval([float(x) for x in samples]) == [low, high], n


def _fake_interleaved(torch_times):
    """An interleaved() whose hal turns take 1 s and whose torch turns take torch_times in order; it records how it
    was called."""
    calls = []
    taken = iter(torch_times)

    def interleaved(runs, repeats, synchronize, warm_up=True):
        calls.append((repeats, warm_up))
        return {"torch": [next(taken) for _ in range(repeats)], "hal": [1.0] * repeats}
    return interleaved, calls


def test_a_settled_cell_takes_only_its_turns():
    from hal.bench import _paired_ratio
    from hal.bench.sweep import settled_turns
    interleaved, calls = _fake_interleaved([1.5] * 100)
    times, ratio = settled_turns({}, 5, 41, lambda: None, interleaved, _paired_ratio)
    assert calls == [(5, True)] and len(times["hal"]) == 5 and ratio["interval"] == [1.5, 1.5]


def test_an_unsettled_cell_takes_turns_until_it_settles_or_reaches_the_limit():
    from hal.bench import _paired_ratio
    from hal.bench.sweep import settled_turns
    # 1.0 within the range of the first five; then steady at 1.2: settles once the 95% interval leaves 1.0 below
    interleaved, calls = _fake_interleaved([0.8, 1.2, 0.9, 1.2, 1.1] + [1.2] * 100)
    times, ratio = settled_turns({}, 5, 41, lambda: None, interleaved, _paired_ratio)
    turns = len(ratio["ratios"])
    assert 5 < turns < 41 and ratio["interval"][0] > 1.0 and len(times["torch"]) == turns
    assert calls[0] == (5, True) and all(call == (4, False) for call in calls[1:])  # warm runs are not warmed again
    # never settling: alternating far below and far above, up to the limit exactly
    interleaved, calls = _fake_interleaved([0.5, 2.0] * 100)
    times, ratio = settled_turns({}, 5, 11, lambda: None, interleaved, _paired_ratio)
    assert len(ratio["ratios"]) == 11 and calls[-1] == (2, False) and ratio["interval"][0] < 1.0 < ratio["interval"][1]
