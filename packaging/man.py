#!/usr/bin/env python3
"""man.py IDEM OUTDIR - write the man pages idem(1) and idem-COMMAND(1), one
per command `idem --help` lists, from the binary's own --help texts (which
one settings table per command writes, so the pages never drift from the
flags). Pages are gzipped (-9, no name or time), as Debian ships them."""
import datetime
import gzip
import os
import re
import subprocess
import sys


def run(idem, *args):
    return subprocess.run([idem, *args], capture_output=True, text=True, check=True).stdout


def roff_text(text):
    out = []
    for line in text.rstrip("\n").split("\n"):
        line = line.replace("\\", "\\e").replace("-", "\\-")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def page(name, summary, version, date, usage, body, see_also):
    return "\n".join([
        '.TH %s 1 "%s" "idem %s" "User Commands"' % (name.upper(), date, version),
        ".SH NAME",
        "%s \\- %s" % (name.replace("-", "\\-"), summary.replace("-", "\\-")),
        ".SH SYNOPSIS", ".nf", roff_text(usage), ".fi",
        ".SH DESCRIPTION", ".nf", roff_text(body), ".fi",
        ".SH SEE ALSO",
        ", ".join("\\fB%s\\fR(1)" % s.replace("-", "\\-") for s in see_also),
        "",
    ])


def split_usage(help_text):
    """The usage lines (the first paragraph) and the rest."""
    head, _, rest = help_text.strip("\n").partition("\n\n")
    usage = [re.sub(r"^usage: ", "", line).strip() for line in head.split("\n")]
    return "\n".join(usage), rest


def write(outdir, name, text):
    with open(os.path.join(outdir, name + ".1.gz"), "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
            gz.write(text.encode())


def main():
    idem, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    version = run(idem, "--version").split()[-1]
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0")) or None
    day = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc) if epoch \
        else datetime.datetime.now(datetime.timezone.utc)
    date = day.strftime("%Y-%m-%d")
    top = run(idem, "--help")
    commands = re.findall(r"^  ([a-z]+) +(.+)$", top.split("commands:", 1)[1], flags=re.M)
    commands = [(c, s) for c, s in commands if c != "version"]
    names = ["idem-" + c for c, _ in commands]
    usage, body = split_usage(top)
    write(outdir, "idem", page("idem", "retried requests and redelivered messages take effect once",
                               version, date, usage, body, names))
    for cmd, summary in commands:
        usage, body = split_usage(run(idem, cmd, "--help"))
        write(outdir, "idem-" + cmd, page("idem-" + cmd, summary, version, date, usage, body,
                                          ["idem"] + [n for n in names if n != "idem-" + cmd]))
    print("man pages: idem " + " ".join(names))


if __name__ == "__main__":
    main()
