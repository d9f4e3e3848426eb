#!/usr/bin/env python3
"""The layout's rules (DESIGN.md §1), checked on the tree: exits 1 naming every violation.

1. Dependencies point one way. Each folder of sdk/src includes only folders of its own level
   or below, and the public headers (sdk/include/shoal) only each other:
     0 core            (and of the public headers only shoal/status.h, shoal/arena.h)
     1 crypto backend data codec
     2 nn privacy transport
     3 aggregate protocol
     4 runtime
     5 capi            (the public C++ API only: shoal/*.h)
2. Command-line plumbing stays out of the SDK: nothing under sdk/ includes
   Boost.Program_options or a cli/ header.
3. A class split over files that share one *_impl.h is a smell being removed (issue 33): no
   new *_impl.h, and those left are included by no more files than today (the target is 3).

  check_layout.py REPO_ROOT
"""
import os
import re
import sys

LEVEL = {"core": 0, "crypto": 1, "backend": 1, "data": 1, "codec": 1, "nn": 2, "privacy": 2, "transport": 2,
         "aggregate": 3, "protocol": 3, "runtime": 4, "capi": 5}
CORE_PUBLIC = {"shoal/status.h", "shoal/arena.h"}
# The most files that may include each *_impl.h; lower these as the classes are split.
IMPL_LIMITS = {"codec_impl.h": 3, "client_impl.h": 4, "peer_impl.h": 7, "service_impl.h": 9}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def sources(root):
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith((".h", ".cc", ".cu", ".cuh")):
                yield os.path.join(d, f)


def main(repo):
    problems = []
    src = os.path.join(repo, "sdk", "src")
    impl_users = {}
    for path in sources(os.path.join(repo, "sdk")):
        rel = os.path.relpath(path, repo)
        text = open(path, encoding="utf-8").read()
        includes = INCLUDE.findall(text)
        public = rel.startswith("sdk/include/")
        top = None if public else os.path.relpath(path, src).split(os.sep)[0]
        for inc in includes:
            first = inc.split("/")[0]
            if inc.startswith("boost/program_options") or first == "cli":
                problems.append(f"{rel}: includes {inc}: command-line plumbing belongs in cli/, not the SDK")
            name = os.path.basename(inc)
            if name.endswith("_impl.h"):
                impl_users.setdefault(name, set()).add(rel)
            if public:
                if "/" in inc and first not in ("shoal", "flatbuffers"):
                    problems.append(f"{rel}: a public header includes {inc} (only shoal/*.h)")
                continue
            if top == "core" and first == "shoal" and inc not in CORE_PUBLIC:
                problems.append(f"{rel}: core includes {inc} (core sits below everything; only "
                                f"{', '.join(sorted(CORE_PUBLIC))})")
            if top == "capi" and first in LEVEL and first != "capi":
                problems.append(f"{rel}: the C ABI includes {inc} (it wraps the public C++ API only)")
            elif top in LEVEL and first in LEVEL and LEVEL[first] > LEVEL[top]:
                problems.append(f"{rel}: {top} (level {LEVEL[top]}) includes {inc} (level {LEVEL[first]}): "
                                f"an arrow pointing up")
    for path in sources(os.path.join(repo, "tests")):
        text = open(path, encoding="utf-8").read()
        for inc in INCLUDE.findall(text):
            if os.path.basename(inc).endswith("_impl.h"):
                impl_users.setdefault(os.path.basename(inc), set()).add(os.path.relpath(path, repo))
    for path in sources(src):
        name = os.path.basename(path)
        if name.endswith("_impl.h") and name not in IMPL_LIMITS:
            problems.append(f"{os.path.relpath(path, repo)}: a new *_impl.h (split the class along typed hand-offs "
                            f"instead of sharing one Impl over files)")
    for name, users in sorted(impl_users.items()):
        limit = IMPL_LIMITS.get(name)
        if limit is not None and len(users) > limit:
            problems.append(f"{name} is included by {len(users)} files, more than the {limit} allowed: "
                            + ", ".join(sorted(users)))
    for p in problems:
        print(p)
    if problems:
        print(f"check_layout: {len(problems)} violation(s)")
        return 1
    print(f"check_layout: the layout's rules hold ({len(impl_users)} *_impl.h within their limits)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
