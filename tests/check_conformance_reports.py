#!/usr/bin/env python3
"""Runs halconform on the fake backends and the host, then checks the reports
as an outside consumer would: every JSON report against the published schema
docs/conformance.schema.json, the JUnit XML and the HTML with standard
parsers."""
import html.parser
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import json_schema_subset  # noqa: E402

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "conformance.schema.json")
with open(SCHEMA_PATH, encoding="utf-8") as schema_file:
    SCHEMA = json.load(schema_file)
OUTCOMES = set(SCHEMA["properties"]["counts"]["required"])


def check_validator():
    """The validator must reject what the schema forbids, or passing proves nothing."""
    bad = {"schema": "hal.conformance/0", "counts": {"PASS": -1}, "results": [{"case": 3}]}
    found = "\n".join(json_schema_subset.errors(bad, SCHEMA))
    for expected in ("'hal.conformance/1'", "$.counts.PASS: -1 < minimum 0", "$.results[0].case: int where string",
                     "'manifest' is required", "$.counts: 'FAIL' is required"):
        assert expected in found, (expected, found)


def check_json(path):
    with open(path, encoding="utf-8") as file:
        report = json.load(file)
    problems = json_schema_subset.errors(report, SCHEMA)
    assert not problems, f"{path} does not validate against {SCHEMA_PATH}:\n" + "\n".join(problems[:20])
    assert sum(report["counts"].values()) == len(report["results"])
    assert report["unjudged"] == report["counts"]["MEASURED"]
    for result in report["results"]:
        # Every result a case produced carries the run's seed.
        if result["tier"] not in ("requirement", ""):
            assert result["seed"] == report["seed"], result
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
    check_validator()
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

    # The new outcomes and cases in reports too: ERROR (a timer reading 0),
    # MEASURED (no floor), the memory test's failure on stuck bits.
    faults = {"HAL_BACKEND_PATH": fake_dir, "HAL_BACKENDS": "host,fake_zerotime,fake_badmemory"}
    code, output = run(halconform, os.path.join(out, "faults"), faults,
                       ["--level", "quick", "--tier", "performance,stress", "--seed", "42", "--filter",
                        "*bandwidth_fill", "--filter", "stress.memory.memtest"])
    assert code == 1, output
    report = check_json(os.path.join(out, "faults", "conformance.json"))
    outcomes = {(r["device"], r["case"]): r["outcome"] for r in report["results"]}
    assert outcomes[("host:0", "performance.memory.bandwidth_fill")] == "MEASURED", outcomes
    assert outcomes[("fake_zerotime:0", "performance.memory.bandwidth_fill")] == "ERROR", outcomes
    assert outcomes[("fake_badmemory:0", "stress.memory.memtest")] == "FAIL", outcomes
    assert outcomes[("host:0", "stress.memory.memtest")] == "PASS", outcomes
    check_junit(os.path.join(out, "faults", "conformance.junit.xml"), report)
    check_html(os.path.join(out, "faults", "conformance.html"), want_chart=True)
    print("reports valid against docs/conformance.schema.json; JUnit XML, HTML with bandwidth chart")


if __name__ == "__main__":
    main()
