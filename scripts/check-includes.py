#!/usr/bin/env python3
"""Include what you use: runs include-what-you-use (Debian's `iwyu`) over the
compile database of a build and prints the advice hal follows; --fix adds what is missing.

The advice kept: standard C++ and POSIX headers a file uses without including
them. Not kept: <compare>, <initializer_list> and <ratio> (iwyu names them for
operators and literals that the headers using them already bring),
third-party and vendor headers (iwyu names their private headers), forward
declarations in place of includes, and removals: with libstdc++, iwyu counts a
symbol whose private header several public ones bring (std::chrono through
<thread>) as provided by any of them, so its "remove <chrono>" is wrong where
<chrono> is what the file uses. Removals are done by hand, checked by a build.

Exit status: 0 when no advice is left, 1 when some is (printed), 2 on a usage
or tool error. Takes a few minutes on two cores; not part of the test run.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED_STD = {"initializer_list", "compare", "ratio"}
POSIX_TOP = {"unistd.h", "dlfcn.h", "fcntl.h", "poll.h", "netdb.h", "pthread.h", "sched.h", "signal.h"}


def is_std(name):
    return name not in SKIPPED_STD and re.fullmatch(r"[a-z_]+", name) is not None


def is_posix(name):
    return name in POSIX_TOP or re.fullmatch(r"(sys|netinet|arpa)/[a-z_]+\.h", name) is not None


def additions(iwyu_output):
    """{file: [header, ...]}: the standard and POSIX headers iwyu says each file
    uses without including."""
    wanted, section, file = {}, None, None
    for line in iwyu_output.splitlines():
        heading = re.match(r"^(\S.*) should (add|remove) these lines:$", line)
        if heading:
            file, section = heading.group(1), heading.group(2)
            continue
        if line.startswith("---"):
            section = None
        if section != "add":
            continue
        include = re.match(r"#include <([^>]+)>", line)
        if include and (is_std(include.group(1)) or is_posix(include.group(1))):
            wanted.setdefault(file, [])
            if include.group(1) not in wanted[file]:
                wanted[file].append(include.group(1))
    return wanted


INCLUDE = re.compile(r"#include\s*([<\"])([^>\"]+)[>\"]")


def insert_includes(lines, headers):
    """lines with each header added the way hal's files are laid out: in
    alphabetical place within the block of its kind (POSIX, then standard
    C++), or as a new block of its own after the file's first block."""
    for header in sorted(headers):
        kind = is_posix if header.endswith(".h") else is_std
        own = [i for i, line in enumerate(lines)
               if (m := INCLUDE.match(line)) and m.group(1) == "<" and kind(m.group(2))]
        text = f"#include <{header}>\n"
        if own:
            after = [i for i in own if INCLUDE.match(lines[i]).group(2) > header]
            lines.insert(after[0] if after else own[-1] + 1, text)
            continue
        includes = [i for i, line in enumerate(lines) if INCLUDE.match(line)]
        if not includes:
            pragma = next((i for i, line in enumerate(lines) if line.startswith("#pragma once")), -1)
            lines[pragma + 1:pragma + 1] = ["\n", text] if pragma >= 0 else [text, "\n"]
            continue
        # The file's first block ends at its first blank line; the new block goes
        # after it, unless that block is already of the other include kind.
        end = includes[0]
        while end + 1 < len(lines) and INCLUDE.match(lines[end + 1]):
            end += 1
        first = INCLUDE.match(lines[includes[0]])
        if first.group(1) == "<" and header.endswith(".h") and not first.group(2).endswith(".h"):
            lines[includes[0]:includes[0]] = [text, "\n"]  # POSIX before the standard library
        else:
            lines[end + 1:end + 1] = ["\n", text]
    return lines


def fail(message):
    print(f"check-includes: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"),
                        help="a configured build of hal (default: build/)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--fix", action="store_true", help="add the missing includes")
    parser.add_argument("files", nargs="*", help="only these sources (default: every one in the database)")
    args = parser.parse_args()
    build_dir = os.path.abspath(args.build_dir)

    def in_tree(path):  # hal's own files, not what the build generated
        return path.startswith(ROOT + os.sep) and not path.startswith(build_dir + os.sep)

    for tool in ("iwyu_tool", "include-what-you-use"):
        if shutil.which(tool) is None:
            fail(f"{tool} is not on PATH; install Debian's iwyu (apt-get install iwyu)")
    if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
        fail(f"{build_dir} is not a configured build; run scripts/build.sh first")
    # The compile database is a configure-time switch; turning it on rebuilds nothing.
    subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        sources = [entry["file"] for entry in json.load(f) if in_tree(entry["file"])]
    files = [os.path.abspath(name) for name in args.files] or sources

    iwyu = subprocess.run(
        ["iwyu_tool", "-p", build_dir, "-j", str(args.jobs), *files, "--",
         "-Xiwyu", "--mapping_file=" + os.path.join(ROOT, "scripts", "iwyu.imp"),
         "-Xiwyu", "--no_fwd_decls", "-Xiwyu", "--cxx17ns"],
        capture_output=True, text=True)
    # iwyu speaks of every file it read, even one that needs nothing; silence
    # means it did not run (a bad mapping file, a compile error), not a pass.
    answered = len(re.findall(r"should add these lines:|has correct #includes", iwyu.stdout))
    if answered < len(files):
        fail(f"iwyu answered for {answered} of {len(files)} files "
                 f"(exit {iwyu.returncode}): {(iwyu.stderr or iwyu.stdout).strip()[-2000:]}")
    wanted = {file: headers for file, headers in additions(iwyu.stdout).items() if in_tree(file)}
    count = sum(len(headers) for headers in wanted.values())
    if count == 0:
        print(f"check-includes: {len(files)} sources (and their headers) include what they use")
        return 0
    for file, headers in sorted(wanted.items()):
        print(f"{os.path.relpath(file, ROOT)}: " + " ".join(f"<{header}>" for header in sorted(headers)))
    if not args.fix:
        print(f"check-includes: {count} includes missing in {len(wanted)} files "
              "(scripts/check-includes.py --fix adds them)")
        return 1
    for file, headers in wanted.items():
        with open(file) as f:
            lines = f.readlines()
        with open(file, "w") as f:
            f.writelines(insert_includes(lines, headers))
    print(f"check-includes: added {count} includes to {len(wanted)} files; build and test before committing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
