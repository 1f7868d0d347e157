#!/usr/bin/env python3
"""Builds fragprobe's wheel: `python3 viewer/wheel/build.py` (see the README, "Install").

The wheel carries the native `fragprobe` command as a script (installed as
`<prefix>/bin/fragprobe`), the probe and the simulated GPU's libraries as data (installed in
`<prefix>/lib/fragprobe/`, where `fragprobe` looks: viewer/src/install.rs) and the small
`fragprobe` Python package (`python -m fragprobe`, `fragprobe.probe_path()`).

Compiled with `cargo zigbuild` against an old glibc when cargo-zigbuild and zig are there
(the default floor is 2.17, manylinux2014: CentOS 7 and every later distribution), else with plain cargo against this
machine's glibc. Either way the platform tag is measured, not assumed: the highest GLIBC_
symbol version any shipped file needs, and only libraries manylinux allows may be needed.

Only the Python standard library is used; `readelf` (binutils) reads the ELF files.
"""

import argparse
import base64
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NAME = "fragprobe"
# cargo packages -> what they build; every file the wheel ships.
PACKAGES = [
    "fragprobe-viewer",
    "fragprobe-probe",
    "fragprobe-simgpu-driver",
    "fragprobe-simgpu-runtime",
    "fragprobe-simgpu-nvml",
]
SCRIPT = "fragprobe"
LIBRARIES = ["libfragprobe.so", "libcuda.so", "libcudart.so", "libnvidia_ml.so"]
# The libraries a manylinux wheel may need from the system (PEP 600 / auditwheel's policy).
ALLOWED_NEEDED = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libutil.so.1",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
}
CLASSIFIERS = [
    "Development Status :: 3 - Alpha",
    "Environment :: Console",
    "Environment :: GPU :: NVIDIA CUDA",
    "Environment :: X11 Applications",
    "Intended Audience :: Developers",
    "Intended Audience :: Science/Research",
    "License :: OSI Approved :: MIT License",
    "License :: OSI Approved :: Apache Software License",
    "Operating System :: POSIX :: Linux",
    "Programming Language :: Python :: 3",
    "Programming Language :: Rust",
    "Topic :: Scientific/Engineering :: Artificial Intelligence",
    "Topic :: Software Development :: Debuggers",
    "Topic :: System :: Monitoring",
]


def workspace_field(field):
    """A `[workspace.package]` field of the root Cargo.toml."""
    text = open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8").read()
    section = re.search(r"^\[workspace\.package\]\n(.*?)(?=^\[)", text, re.S | re.M)
    m = section and re.search(r'^%s\s*=\s*"([^"]*)"' % field, section.group(1), re.M)
    if not m:
        sys.exit("build.py: no %s in [workspace.package] of Cargo.toml" % field)
    return m.group(1)


def have_zigbuild():
    try:
        subprocess.run(["cargo", "zigbuild", "--help"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    if shutil.which("zig"):
        return True
    # cargo-zigbuild also runs zig from the `ziglang` PyPI package (python3 -m ziglang)
    r = subprocess.run([sys.executable, "-m", "ziglang", "version"], capture_output=True)
    return r.returncode == 0


def build(arch, glibc, use_zig):
    """Compiles the shipped crates with the `dist` profile; returns the artifact directory."""
    triple = "%s-unknown-linux-gnu" % arch
    packages = [a for p in PACKAGES for a in ("-p", p)]
    env = dict(os.environ)
    env.setdefault("CARGO_INCREMENTAL", "0")
    if use_zig:
        cmd = ["cargo", "zigbuild", "--profile", "dist", "--target", "%s.%s" % (triple, glibc)]
        out = os.path.join(ROOT, "target", triple, "dist")
    else:
        cmd = ["cargo", "build", "--profile", "dist"]
        out = os.path.join(ROOT, "target", "dist")
    print("build.py: " + " ".join(cmd + packages), flush=True)
    subprocess.run(cmd + packages, cwd=ROOT, env=env, check=True)
    return out


def elf_facts(path):
    """(needed libraries, highest GLIBC_ version needed as a tuple) of an ELF file."""
    try:
        dyn = subprocess.run(
            ["readelf", "-d", "-V", "-W", path], capture_output=True, text=True, check=True
        ).stdout
    except OSError:
        sys.exit("build.py: readelf is missing (install binutils)")
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    versions = [tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", dyn)]
    return needed, max(versions, default=(2, 17))


def platform_tags(floor, arch):
    tags = ["manylinux_%d_%d_%s" % (floor[0], floor[1], arch)]
    if floor[:2] <= (2, 17):
        tags.append("manylinux2014_%s" % arch)  # the legacy alias older pips understand
    return tags


def record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def metadata(version, repository, license_expr):
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    head = [
        "Metadata-Version: 2.1",
        "Name: %s" % NAME,
        "Version: %s" % version,
        "Summary: Find out why CUDA ran out of memory while nvidia-smi says gigabytes are free: "
        "a CUDA allocator fragmentation profiler",
        "Keywords: cuda,gpu,memory,fragmentation,profiler,pytorch,oom,nvml",
        "License: %s" % license_expr,
        "Requires-Python: >=3.8",
        "Project-URL: Source, %s" % repository,
        "Project-URL: Documentation, %s#readme" % repository,
        "Project-URL: Issues, %s/issues" % repository,
    ]
    head += ["Classifier: %s" % c for c in CLASSIFIERS]
    head += ["Description-Content-Type: text/markdown", "", readme]
    return "\n".join(head)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "wheels"), help="where the wheel goes")
    ap.add_argument("--glibc", default="2.17", help="the glibc floor to compile for with cargo zigbuild (2.17: manylinux2014)")
    ap.add_argument("--arch", default=platform.machine(), help="x86_64 or aarch64 (needs that Rust target)")
    ap.add_argument("--no-zig", action="store_true", help="plain cargo build: this machine's glibc is the floor")
    ap.add_argument(
        "--artifacts",
        metavar="DIR",
        help="package what is already built in DIR (e.g. target/debug) instead of compiling",
    )
    ap.add_argument("--compress-level", type=int, default=9, help="zip's deflate level (tests use 1)")
    args = ap.parse_args()

    version = workspace_field("version")
    if args.artifacts:
        art = os.path.abspath(args.artifacts)
    else:
        use_zig = not args.no_zig and have_zigbuild()
        if not use_zig and not args.no_zig:
            print(
                "build.py: cargo-zigbuild or zig not found (cargo install cargo-zigbuild; pip install ziglang):"
                " compiling against this machine's glibc, which becomes the wheel's floor",
                flush=True,
            )
        art = build(args.arch, args.glibc, use_zig)

    files = [(SCRIPT, "%s-%s.data/scripts/%s" % (NAME, version, SCRIPT))]
    files += [(lib, "%s-%s.data/data/lib/fragprobe/%s" % (NAME, version, lib)) for lib in LIBRARIES]
    floor = (2, 17)
    for built, _ in files:
        path = os.path.join(art, built)
        if not os.path.isfile(path):
            sys.exit("build.py: %s is missing (build it: cargo build --profile dist %s)" % (path, " ".join("-p " + p for p in PACKAGES)))
        needed, need = elf_facts(path)
        bad = sorted(set(needed) - ALLOWED_NEEDED)
        if bad:
            sys.exit("build.py: %s needs %s, which a manylinux wheel may not take from the system" % (built, ", ".join(bad)))
        floor = max(floor, need)
        print("build.py: %-18s %7.1f MB  needs glibc %s  (%s)" % (built, os.path.getsize(path) / 1e6, ".".join(map(str, need)), ", ".join(needed) or "nothing"))

    tags = platform_tags(floor, args.arch)
    wheel_tag = "py3-none-" + ".".join(tags)
    dist_info = "%s-%s.dist-info" % (NAME, version)
    stamp = time.gmtime(max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800))[:6]

    entries = []  # (arcname, bytes, mode)
    for src in ("__init__.py", "__main__.py"):
        data = open(os.path.join(HERE, NAME, src), "rb").read()
        if src == "__init__.py":
            data = data.replace(b'__version__ = "0.0.0"', b'__version__ = "%s"' % version.encode())
        entries.append(("%s/%s" % (NAME, src), data, 0o644))
    for built, arcname in files:
        entries.append((arcname, open(os.path.join(art, built), "rb").read(), 0o755))
    entries.append(("%s/METADATA" % dist_info, metadata(version, workspace_field("repository"), workspace_field("license")).encode(), 0o644))
    wheel = "Wheel-Version: 1.0\nGenerator: fragprobe viewer/wheel/build.py\nRoot-Is-Purelib: false\n"
    wheel += "".join("Tag: py3-none-%s\n" % t for t in tags)
    entries.append(("%s/WHEEL" % dist_info, wheel.encode(), 0o644))
    record = "".join(record_line(a, d) + "\n" for a, d, _ in entries) + "%s/RECORD,,\n" % dist_info
    entries.append(("%s/RECORD" % dist_info, record.encode(), 0o644))

    os.makedirs(args.out, exist_ok=True)
    target = os.path.join(args.out, "%s-%s-%s.whl" % (NAME, version, wheel_tag))
    tmp = target + ".part"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=args.compress_level) as z:
        for arcname, data, mode in entries:
            info = zipfile.ZipInfo(arcname, date_time=stamp)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, target)
    print("build.py: %s (%.1f MB, glibc floor %s)" % (target, os.path.getsize(target) / 1e6, ".".join(map(str, floor))))


if __name__ == "__main__":
    main()
