#!/usr/bin/env python3
"""Checks macOS binaries built on Linux (tools/check_metal.sh, tools/build_macos_wheel.sh), as a Mac's loader would
see them:

    tools/check_macho.py --arch arm64 [--python-module] FILE ...

- a thin 64-bit Mach-O of the architecture, a dylib or a bundle, built for macOS (LC_BUILD_VERSION) 12.0;
- its install name (a library's) and every library it loads are @rpath/, @loader_path/ or /usr/lib and
  /System/Library paths (a path of the build machine, or Homebrew's, is not on the user's Mac); its rpaths are
  @loader_path ones;
- every symbol it imports is bound to one of the libraries it loads, except, with --python-module, the Python C API
  (_Py*, __Py*), which the host process provides and which it looks up by name (-undefined dynamic_lookup);
- its ad hoc code signature is valid: a CodeDirectory whose hash of each page is the SHA-256 of that page as the file
  holds it now (after install_name_tool, say). Apple silicon refuses to load a binary whose page hashes do not match,
  or that has none; on x86_64 (which the linker does not sign) a signature is checked where there is one.

Uses llvm-otool and llvm-nm from Debian's LLVM 19. Prints one line per file; exits 1 if any check fails.
"""

import argparse
import hashlib
import re
import struct
import subprocess
import sys

LLVM = "/usr/lib/llvm-19/bin"
MH_MAGIC_64 = 0xFEEDFACF
CPU_TYPES = {"arm64": 0x0100000C, "x86_64": 0x01000007}
FILETYPES = {6: "dylib", 8: "bundle"}
LC_CODE_SIGNATURE = 0x1D
CSMAGIC_EMBEDDED_SIGNATURE = 0xFADE0CC0
CSMAGIC_CODEDIRECTORY = 0xFADE0C02
CS_HASHTYPE_SHA256 = 2
CS_ADHOC = 0x2
LOADABLE = re.compile(r"^(@rpath/|@loader_path/|/usr/lib/|/System/Library/)")


def tool(name, *arguments):
    return subprocess.run([f"{LLVM}/{name}", *arguments], check=True, capture_output=True, text=True).stdout


def code_signature_problems(data, dataoff, datasize):
    """Why the embedded signature at dataoff does not match the file, or []."""
    blob = data[dataoff:dataoff + datasize]
    magic, _, count = struct.unpack_from(">III", blob, 0)
    if magic != CSMAGIC_EMBEDDED_SIGNATURE:
        return [f"the signature is not an embedded signature (magic {magic:#x})"]
    directories = []
    for i in range(count):
        _, offset = struct.unpack_from(">II", blob, 12 + 8 * i)
        if struct.unpack_from(">I", blob, offset)[0] == CSMAGIC_CODEDIRECTORY:
            directories.append(offset)
    if not directories:
        return ["the signature has no CodeDirectory"]
    problems = []
    for at in directories:
        (_, _, _, flags, hash_offset, _, _, code_slots, code_limit, hash_size, hash_type, _,
         page_log2) = struct.unpack_from(">IIIIIIIIIBBBB", blob, at)
        if hash_type != CS_HASHTYPE_SHA256:
            continue  # a SHA-1 directory beside the SHA-256 one; macOS 12 reads the latter
        if not flags & CS_ADHOC:
            problems.append(f"the CodeDirectory is not ad hoc (flags {flags:#x})")
        if code_limit != dataoff:
            problems.append(f"the signature covers {code_limit} bytes; the code ends at {dataoff}")
        page = 1 << page_log2
        expected_slots = (code_limit + page - 1) // page
        if code_slots != expected_slots:
            problems.append(f"{code_slots} page hashes for {expected_slots} pages")
        bad = [i for i in range(min(code_slots, expected_slots))
               if blob[at + hash_offset + i * hash_size:at + hash_offset + (i + 1) * hash_size] !=
               hashlib.sha256(data[i * page:min((i + 1) * page, code_limit)]).digest()[:hash_size]]
        if bad:
            problems.append(f"{len(bad)} of {code_slots} page hashes do not match the file (first: page {bad[0]})")
        return problems
    return problems + ["the signature has no SHA-256 CodeDirectory"]


def check(path, arch, python_module):
    problems = []
    with open(path, "rb") as f:
        data = f.read()
    magic, cputype, _, filetype, ncmds, _, _, _ = struct.unpack_from("<IiIIIIII", data, 0)
    if magic != MH_MAGIC_64:
        return [f"not a thin 64-bit Mach-O (magic {magic:#x})"]
    if cputype != CPU_TYPES[arch]:
        problems.append(f"CPU type {cputype:#x}, expected {arch}'s {CPU_TYPES[arch]:#x}")
    if filetype not in FILETYPES:
        problems.append(f"file type {filetype}, expected a dylib or a bundle")
    signature = None
    at = 32
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, at)
        if cmd == LC_CODE_SIGNATURE:
            signature = struct.unpack_from("<II", data, at + 8)
        at += size

    commands = tool("llvm-otool", "-l", path)
    minos = re.findall(r"cmd LC_BUILD_VERSION\n.*?platform (\d+)\n.*?minos ([\d.]+)", commands, re.S)
    if minos != [("1", "12.0")]:
        problems.append(f"built for {minos} (platform, minos), expected macOS (1) 12.0")
    rpaths = re.findall(r"cmd LC_RPATH\n.*?path (\S+)", commands, re.S)
    problems += [f"rpath {r} is not @loader_path-relative" for r in rpaths if not r.startswith("@loader_path")]
    names = re.findall(r"cmd LC_(?:ID|LOAD|LOAD_WEAK|REEXPORT)_DYLIB\n.*?name (\S+)", commands, re.S)
    problems += [f"loads {n}, a path outside macOS itself (a wheel's libraries load through @rpath or @loader_path)"
                 for n in names if not LOADABLE.match(n)]

    # llvm-nm -m: "(undefined) [weak] external NAME (from LIBRARY)", or "(dynamically looked up)" when flat.
    flat = [m[1] for m in re.finditer(r"external (\S+)(?: \((from \S+|dynamically looked up)\))?$",
                                      tool("llvm-nm", "-m", "-u", path), re.M) if not (m[2] or "").startswith("from")]
    allowed = re.compile(r"^__?Py") if python_module else None
    unexpected = sorted(s for s in flat if not (allowed and allowed.match(s)))
    if unexpected:
        problems.append(f"{len(unexpected)} undefined symbols not bound to a library: {', '.join(unexpected[:8])}")

    if signature is None:
        if arch == "arm64":
            problems.append("no code signature (Apple silicon loads only signed code)")
    else:
        problems += code_signature_problems(data, *signature)
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", choices=sorted(CPU_TYPES), required=True)
    parser.add_argument("--python-module", action="store_true",
                        help="allow the Python C API to be looked up in the host process")
    parser.add_argument("files", nargs="+")
    a = parser.parse_args()
    status = 0
    for path in a.files:
        problems = check(path, a.arch, a.python_module)
        print(f"check_macho: {path}: " + ("; ".join(problems) if problems else "ok"))
        status |= bool(problems)
    return status


if __name__ == "__main__":
    sys.exit(main())
