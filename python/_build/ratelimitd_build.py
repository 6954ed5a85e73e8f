"""The build backend (PEP 517) of the ratelimitd distribution: a wheel and
an sdist of the pure-Python package ratelimitd/, with core metadata 2.4
(PEP 639: License-Expression and License-File).

Written here rather than taken from setuptools, flit or hatchling because
the Debian release the project builds on (bookworm, with no package index)
has setuptools 66, flit_core 3.8 and hatchling 1.12, none of which writes
PEP 639 metadata: setuptools refuses `license = "Apache-2.0"` in
pyproject.toml. It builds only what this package needs: every file of
ratelimitd/ (following the symbolic link ratelimitd/proto to the generated
stubs, gen/python), without bytecode, into a py3-none-any wheel; the sdist
holds the same files, so that it builds the same wheel. Outputs are
reproducible: fixed timestamps and modes, sorted entries.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Dict, List, Optional, Tuple

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "ratelimitd"
# ZIP's earliest date: the wheel's entries carry it, whatever the checkout's.
EPOCH = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS = {"__pycache__"}
_SKIP_FILES = {".gitignore"}


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _version() -> str:
    with open(os.path.join(ROOT, PACKAGE, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not m:
        raise RuntimeError(f"{PACKAGE}/__init__.py has no __version__")
    return m.group(1)


def _name_version() -> Tuple[str, str]:
    return _project()["name"], _version()


def metadata() -> str:
    """The core metadata (METADATA, PKG-INFO) of pyproject.toml's [project]."""
    p = _project()
    lines = ["Metadata-Version: 2.4", f"Name: {p['name']}", f"Version: {_version()}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    lic = p.get("license")
    if not isinstance(lic, str):
        raise RuntimeError("pyproject.toml: project.license must be an SPDX expression (PEP 639)")
    lines.append(f"License-Expression: {lic}")
    for f in p.get("license-files", []):
        lines.append(f"License-File: {f}")
    for label, url in p.get("urls", {}).items():
        lines.append(f"Project-URL: {label}, {url}")
    for c in p.get("classifiers", []):
        lines.append(f"Classifier: {c}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    for d in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {d}")
    body = ""
    if p.get("readme"):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, p["readme"]), encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _package_files() -> List[str]:
    """The files of the package, relative to ROOT, sorted."""
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, PACKAGE), followlinks=True):
        dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS)
        for f in files:
            if f in _SKIP_FILES or f.endswith((".pyc", ".pyo")):
                continue
            out.append(os.path.relpath(os.path.join(d, f), ROOT))
    return sorted(p.replace(os.sep, "/") for p in out)


def _read(rel: str) -> bytes:
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel_entries() -> Dict[str, bytes]:
    name, version = _name_version()
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    entries = {rel: _read(rel) for rel in _package_files()}
    entries[f"{info}/METADATA"] = metadata().encode("utf-8")
    entries[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: ratelimitd_build\nRoot-Is-Purelib: true\n"
                                b"Tag: py3-none-any\n")
    for lf in _project().get("license-files", []):
        entries[f"{info}/licenses/{lf}"] = _read(lf)
    record = "".join(f"{n},{_record_hash(b)},{len(b)}\n" for n, b in entries.items())
    entries[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    return entries


def _zip(path: str, entries: Dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in entries.items():
            zi = zipfile.ZipInfo(n, EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, b)


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    name, version = _name_version()
    wheel = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    _zip(os.path.join(wheel_directory, wheel), _wheel_entries())
    return wheel


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    name, version = _name_version()
    base = f"{name.replace('-', '_')}-{version}"
    files = ["pyproject.toml", "README.md", "_build/ratelimitd_build.py"]
    files += [f for f in _project().get("license-files", []) if f not in files]
    entries = {f"{base}/{rel}": _read(rel) for rel in files + _package_files()}
    entries[f"{base}/PKG-INFO"] = metadata().encode("utf-8")
    out = f"{base}.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for n in sorted(entries):
            ti = tarfile.TarInfo(n)
            ti.size, ti.mode, ti.mtime = len(entries[n]), 0o644, 315532800  # 1980-01-01
            t.addfile(ti, io.BytesIO(entries[n]))
    import gzip
    with open(os.path.join(sdist_directory, out), "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as g:
            g.write(buf.getvalue())
    return out
