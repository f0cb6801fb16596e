#!/usr/bin/env python3
"""Runs halconform on the fake backends and the host, then checks the reports
as an outside consumer would: the JSON against the required fields of schema
hal.conformance/1 (docs/conformance.md), the JUnit XML and the HTML with
standard parsers."""
import html.parser
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

OUTCOMES = {"PASS", "WARN", "FAIL", "UNSUPPORTED", "SKIPPED", "XFAIL", "XPASS", "ERROR", "CRASH", "TIMEOUT"}
REQUIRED_TOP = {"schema": str, "hal_version": str, "profile": dict, "command_line": list, "started_at": str,
                "finished_at": str, "duration_seconds": (int, float), "jobs": int, "verdict": str, "exit_code": int,
                "counts": dict, "backends": list, "devices": list, "results": list, "waivers": dict, "notes": list,
                "manifest": dict}
REQUIRED_RESULT = {"case": str, "device": str, "tier": str, "outcome": str, "duration_ms": (int, float),
                   "probe": bool, "evidence": dict}
REQUIRED_DEVICE = {"id": str, "backend": str, "name": str, "vendor": str, "uuid": str, "version_axes": dict,
                   "capabilities": dict}


def check_fields(value, required, where):
    for key, kind in required.items():
        if key not in value:
            raise AssertionError(f"{where}: missing '{key}'")
        if not isinstance(value[key], kind):
            raise AssertionError(f"{where}: '{key}' is {type(value[key]).__name__}")


def check_json(path):
    with open(path, encoding="utf-8") as file:
        report = json.load(file)
    check_fields(report, REQUIRED_TOP, path)
    assert report["schema"] == "hal.conformance/1", report["schema"]
    assert report["verdict"] in {"pass", "fail", "error", "inconclusive"}
    assert set(report["counts"]) == OUTCOMES, report["counts"]
    assert sum(report["counts"].values()) == len(report["results"])
    for device in report["devices"]:
        check_fields(device, REQUIRED_DEVICE, f"{path} device")
    for result in report["results"]:
        check_fields(result, REQUIRED_RESULT, f"{path} result {result.get('case')}")
        assert result["outcome"] in OUTCOMES, result["outcome"]
        assert isinstance(result["evidence"]["message"], str)
        assert isinstance(result["evidence"]["measurements"], list)
        if result["outcome"] == "UNSUPPORTED":
            assert result["capability"]["source"] in {"declaration", "quirk", "none"}
    manifest = report["manifest"]
    for key in ("host", "libraries", "environment"):
        assert key in manifest, key
    for library in manifest["libraries"]:
        assert len(library["sha256"]) == 64 or library.get("problem"), library
    return report


def check_junit(path, report):
    root = ElementTree.parse(path).getroot()
    assert root.tag == "testsuites"
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == len(report["results"]), (len(cases), len(report["results"]))
    failures = len(root.findall("./testsuite/testcase/failure"))
    expected = sum(report["counts"][o] for o in ("FAIL", "CRASH", "TIMEOUT"))
    assert failures == expected == int(root.get("failures")), (failures, expected)


class Collector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


def check_html(path, want_chart):
    collector = Collector()
    with open(path, encoding="utf-8") as file:
        collector.feed(file.read())
    for tag in ("html", "table", "h1"):
        assert tag in collector.tags, tag
    if want_chart:
        assert "svg" in collector.tags and "polyline" in collector.tags, "no bandwidth chart"


def run(halconform, report_dir, environment, arguments):
    env = dict(os.environ, HAL_PROBE_CACHE=os.path.join(report_dir, "probes.json"), **environment)
    completed = subprocess.run([halconform, "--report-dir", report_dir] + arguments, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return completed.returncode, completed.stdout


def main():
    halconform, fake_dir, out = sys.argv[1], sys.argv[2], sys.argv[3]
    fakes = {"HAL_BACKEND_PATH": fake_dir, "HAL_BACKENDS": "fake_crash,fake_hang,fake_overclaim,fake_bitflip"}
    code, output = run(halconform, os.path.join(out, "fakes"), fakes, ["--timeout", "2", "--jobs", "4"])
    assert code == 1, output
    report = check_json(os.path.join(out, "fakes", "conformance.json"))
    outcomes = {(r["device"], r["case"]): r["outcome"] for r in report["results"]}
    assert outcomes[("fake_crash:0", "api.memory.fill_patterns")] == "CRASH"
    assert outcomes[("fake_hang:0", "api.stream.in_order")] == "TIMEOUT"
    assert outcomes[("fake_overclaim:0", "api.memory.managed")] == "FAIL"
    assert outcomes[("fake_bitflip:0", "api.memory.copy_roundtrip")] == "FAIL"
    check_junit(os.path.join(out, "fakes", "conformance.junit.xml"), report)
    check_html(os.path.join(out, "fakes", "conformance.html"), want_chart=False)

    code, output = run(halconform, os.path.join(out, "host"), {"HAL_BACKENDS": "host"},
                       ["--tier", "identity,performance", "--filter", "identity.*", "--filter", "*bandwidth_fill"])
    assert code == 0, output
    report = check_json(os.path.join(out, "host", "conformance.json"))
    check_junit(os.path.join(out, "host", "conformance.junit.xml"), report)
    check_html(os.path.join(out, "host", "conformance.html"), want_chart=True)
    print("reports valid: JSON schema fields, JUnit XML, HTML with bandwidth chart")


if __name__ == "__main__":
    main()
