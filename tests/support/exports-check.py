#!/usr/bin/env python3
"""exports-check.py NM LIB HEADER... - the shared library exports exactly what
the public headers declare with IDEM_API: no internal function leaks into the
ABI, and no declared function is missing from it.

The names come from `NM -D --defined-only LIB` (names starting with '_' are
the toolchain's and sanitizers', not ours) and from each IDEM_API declaration
in the headers: a function's name is the identifier before its parameter
list, a variable's the last identifier of its declarator."""
import re
import subprocess
import sys


def declared(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)  # the macro's own #define
    names = set()
    for m in re.finditer(r"\bIDEM_API\b([^;{]*)", text):
        decl = m.group(1)
        fp = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", decl)  # a function pointer variable
        fn = re.match(r"[^(]*?([A-Za-z_]\w*)\s*\(", decl)
        var = re.findall(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=.*)?$", decl.strip())
        name = fp.group(1) if fp else fn.group(1) if fn else var[0] if var else None
        if not name:
            sys.exit(f"{path}: cannot read the name in 'IDEM_API{decl}'")
        names.add(name)
    return names


def exported(nm, lib):
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        name = fields[-1].split("@")[0]
        if not name.startswith("_"):
            names.add(name)
    return names


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: exports-check.py NM LIB HEADER...")
    nm, lib, headers = sys.argv[1], sys.argv[2], sys.argv[3:]
    want = set()
    for h in headers:
        want |= declared(h)
    have = exported(nm, lib)
    extra, missing = sorted(have - want), sorted(want - have)
    for name in extra:
        print(f"exported but not declared with IDEM_API in a public header: {name}")
    for name in missing:
        print(f"declared with IDEM_API but not exported: {name}")
    print(f"exports check: {len(have)} exported, {len(want)} declared, "
          f"{len(extra)} extra, {len(missing)} missing")
    return 1 if extra or missing else 0


if __name__ == "__main__":
    sys.exit(main())
