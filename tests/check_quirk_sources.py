#!/usr/bin/env python3
"""Every shipped quirk names its source (a release note, an issue).

Usage: check_quirk_sources.py data/quirks.toml. Exits 1 listing the ids
without one; 2 when the file holds no quirk at all.
"""
import sys
import tomllib

with open(sys.argv[1], "rb") as file:
    quirks = tomllib.load(file).get("quirk", [])
if not quirks:
    print(f"no [[quirk]] entries in {sys.argv[1]}")
    sys.exit(2)
missing = [quirk.get("id", "<no id>") for quirk in quirks if not str(quirk.get("source", "")).strip()]
if missing:
    print(f"quirks without a source in {sys.argv[1]}: {', '.join(missing)}")
    sys.exit(1)
print(f"{len(quirks)} quirks, each with its source")
