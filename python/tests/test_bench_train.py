"""python -m hal.bench train: a 2-layer Llama-3-8B-shaped model, 2 ranks, 3 steps, every ablation axis; every cell's
loss agrees with the baseline's, the JSON follows docs/bench-train.schema.json, the HTML renders in headless
Chromium; bad input is refused before any work; a cell whose loss leaves the baseline's is WRONG."""
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from hal.bench import train_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--layers", "2", "--hidden", "128", "--vocab", "512", "--seq", "64", "--batch", "2", "--steps", "3",
         "--warmup", "1"]


def bench(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "hal.bench", "train", *args], capture_output=True, text=True,
                          timeout=timeout)


def schema_errors(report):
    spec = importlib.util.spec_from_file_location("json_schema_subset", ROOT / "tests" / "json_schema_subset.py")
    validator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(validator)
    return validator.errors(report, json.loads((ROOT / "docs" / "bench-train.schema.json").read_text()))


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    result = bench(*SMALL, "-n", "2", "--ablate", "--json", str(out / "report.json"), "--html",
                   str(out / "report.html"), "--quiet")
    return result, out


def test_every_ablation_cell_runs_and_agrees_with_the_baseline(ablation):
    result, out = ablation
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "report.json").read_text())
    cells = {c["name"]: c for c in report["cells"]}
    seen = {axis: {c["cell"][axis] for c in report["cells"]} for axis in ("attention", "collectives", "compile",
                                                                          "checkpoint")}
    assert seen == {"attention": {"torch", "hal", "hal-flash", "hal-math"},
                    "collectives": {"gloo", "hal", "hal-gloo", "hal-mpi"}, "compile": {False, True},
                    "checkpoint": {"none", "plan", "all"}}
    for name, cell in cells.items():
        if cell.get("error", "").startswith("unavailable"):  # mpirun missing: the reason
            assert cell["cell"]["collectives"] == "hal-mpi" and shutil.which("mpirun") is None, cell
            continue
        if cell["cell"]["checkpoint"] == "plan":  # hal.torch.memory planned it under CHECKPOINT_OPTIMIZATION
            assert "plan: checkpoint" in cell["plan"] and "budget" in cell["plan"], cell["plan"]
        assert "error" not in cell, f"{name}: {cell.get('error')}"
        assert cell["loss_matches_baseline"], f"{name}: {cell['losses']} against {report['cells'][0]['losses']}"
        assert len(cell["losses"]) == 4 and cell["tokens_per_s"] > 0 and 0 < cell["mfu"] < 1.5
        assert cell["world_size"] == 2
        assert cell["tokens_per_s"] == pytest.approx(2 * 2 * 64 / cell["step_p50_s"])
    assert report["cells"][0]["baseline"] and "WRONG" not in result.stdout
    assert schema_errors(report) == []


def test_table_and_html(ablation):
    result, out = ablation
    assert "(baseline)" in result.stdout and "tokens/s" in result.stdout
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 4 and "loss per step" in page and "time of one profiled step" in page
    # The charts name each cell by what it changes from the baseline.
    assert ">baseline</text>" in page and ">attention=hal-math</text>" in page
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/install-deps.sh installs it)")
    shot = out / "report.png"
    render = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                             "--window-size=1000,1600", f"file://{out / 'report.html'}"], capture_output=True,
                            text=True, timeout=120)
    assert render.returncode == 0 and shot.stat().st_size > 10_000, render.stderr
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          f"file://{out / 'report.html'}"], capture_output=True, text=True, timeout=120)
    assert "attention=hal-math" in dom.stdout and "<polyline" in dom.stdout


@pytest.mark.parametrize("flags, words", [
    (["--model", "gpt-17"], "unknown; choose one of"),
    (["--hidden", "100", "--heads", "3"], "does not split into 3 heads"),
    (["--parallel", "fsdp", "-n", "3", "--hidden", "128"], "does not shard evenly"),
    (["--steps", "0"], "--steps is 0"),
])
def test_bad_input_is_refused_before_any_work(flags, words):
    result = bench(*flags, timeout=120)
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert "[1/" not in result.stdout  # no cell started


def test_a_cell_whose_loss_leaves_the_baseline_is_wrong():
    report = {"cells": [{"losses": [2.0, 1.5, 1.2]}, {"losses": [2.0, 1.5, 1.2 * (1 + 1e-4)]},
                        {"losses": [2.0, 1.6, 1.3]}, {"error": "failed"}]}
    assert train_report.check_losses(report, rtol=1e-3) is True
    assert [c.get("loss_matches_baseline") for c in report["cells"]] == [True, True, False, None]
    report["cells"].pop(2)
    assert train_report.check_losses(report, rtol=1e-3) is False


def test_compare_names_what_changed(capsys):
    cell = {"name": "attention=hal", "tokens_per_s": 100.0, "losses": [1.0]}
    old = {"schema": train_report.SCHEMA, "created": "then", "machine": {"torch": "2.14"}, "config": {"seq": 64},
           "cells": [cell]}
    new = {"schema": train_report.SCHEMA, "created": "now", "machine": {"torch": "2.15"}, "config": {"seq": 128},
           "cells": [dict(cell, tokens_per_s=150.0), dict(cell, name="attention=torch")]}
    train_report.print_comparison(old, new)
    text = capsys.readouterr().out
    assert "machine torch: 2.14 -> 2.15" in text and "config seq: 64 -> 128" in text
    assert "tokens/s 100 -> 150 (+50.0%)" in text and "attention=torch: new cell" in text


def test_a_transformers_model_trains_through_hal(tmp_path):
    """--hf llama: a Hugging Face transformers Llama of the same shape; hal's attention and torch's give one loss."""
    pytest.importorskip("transformers")
    result = bench(*SMALL, "--hf", "llama", "--ablate", "attention", "--json", str(tmp_path / "hf.json"), "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "hf.json").read_text())
    assert [c["cell"]["attention"] for c in report["cells"]] == ["hal", "torch", "hal-flash", "hal-math"]
    assert all(c["loss_matches_baseline"] for c in report["cells"]), [c.get("losses") for c in report["cells"]]
