"""vLLM releases from PyPI: which versions exist, and each release's wheel, hash-pinned and cached.

The sha256 of a release file comes from PyPI's JSON API (``digests.sha256``); a wheel is
downloaded whole, hashed while it streams into a temporary file beside its cache entry, and
renamed into place only when the hash matches, so the cache never holds a partial or
unverified file. A cache entry is named by its sha256 (``<cache>/pypi/<sha256>/<filename>``)
and is therefore trusted on later runs without re-hashing.

Why whole wheels and not HTTP range requests on the zip: the pin is the sha256 of the whole
file, which a range reader cannot check (the per-member hashes in the wheel's ``RECORD`` are
inside the unverified bytes). vLLM wheels are 230-320 MiB; from our build machines PyPI
serves them at ~100 MB/s (measured: 239 MB in 2.2 s), so one verified download per release,
cached, costs seconds and keeps the pin honest.

The project endpoint ``/pypi/<project>/json`` is used (it lists every release with its files'
digests and sizes); the per-version endpoint answers 404 through the proxy our build
machines use, and carries the same fields.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import requests

from builder.errors import BuilderError

DEFAULT_INDEX = os.environ.get("M3_PYPI_URL", "https://pypi.org")
PROJECT = "vllm"
_VERSION_RE = re.compile(r"^\d+(?:\.\d+)*$")  # final releases only (no rc, dev, post)
_CHUNK = 1 << 20


class PyPIError(BuilderError):
    """PyPI answered with an error, lacks the release, or served bytes that fail the pin."""


@dataclass(frozen=True)
class ReleaseFile:
    version: str
    filename: str
    url: str
    sha256: str
    size: int


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


class PyPI:
    """One index, one project; the release list is fetched once per instance."""

    def __init__(
        self,
        index: str = DEFAULT_INDEX,
        project: str = PROJECT,
        session: requests.Session | None = None,
    ):
        self.index = index.rstrip("/")
        self.project = project
        self.session = session or requests.Session()
        self._releases: dict[str, list[dict]] | None = None

    @property
    def json_url(self) -> str:
        return f"{self.index}/pypi/{self.project}/json"

    def releases(self) -> dict[str, list[dict]]:
        if self._releases is None:
            try:
                response = self.session.get(self.json_url, timeout=60)
            except requests.RequestException as exc:
                raise PyPIError(f"{self.json_url}: unreachable ({type(exc).__name__})") from None
            if response.status_code != 200:
                raise PyPIError(f"{self.json_url}: HTTP {response.status_code}")
            try:
                releases = response.json()["releases"]
                if not isinstance(releases, dict):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise PyPIError(
                    f"{self.json_url}: not a PyPI JSON API answer (no 'releases' mapping)"
                ) from None
            self._releases = releases
        return self._releases

    def versions(self) -> list[str]:
        """Final, non-yanked releases that have files, oldest first."""
        out = [
            v
            for v, files in self.releases().items()
            if _VERSION_RE.match(v) and files and not all(f.get("yanked") for f in files)
        ]
        return sorted(out, key=version_key)

    def expand(self, specs: list[str]) -> list[str]:
        """``0.30.0`` or ``0.24.0..0.34.0`` (both ends included) -> versions, in order, no repeats.
        A version that PyPI does not carry is an error naming it."""
        known = self.versions()
        out: list[str] = []
        for spec in specs:
            if ".." in spec:
                low, high = spec.split("..", 1)
                for end in (low, high):
                    self._require(end, known)
                picked = [
                    v for v in known if version_key(low) <= version_key(v) <= version_key(high)
                ]
            else:
                self._require(spec, known)
                picked = [spec]
            out.extend(v for v in picked if v not in out)
        return out

    def _require(self, version: str, known: list[str]) -> None:
        if version not in known:
            near = ", ".join(known[-3:])
            raise PyPIError(f"vllm=={version}: not a release on {self.index} (newest: {near})")

    def wheel(self, version: str) -> ReleaseFile:
        """The release's linux x86_64 wheel (the ROCm images ship the same Python sources)."""
        files = self.releases().get(version)
        if not files:
            raise PyPIError(f"vllm=={version}: not a release on {self.index}")
        wheels = [f for f in files if f.get("filename", "").endswith("x86_64.whl")]
        if not wheels:
            raise PyPIError(f"vllm=={version}: no x86_64 wheel on {self.index}")
        f = wheels[0]
        sha = (f.get("digests") or {}).get("sha256", "")
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise PyPIError(f"{self.json_url}: {f['filename']}: no sha256 digest")
        return ReleaseFile(
            version=version,
            filename=f["filename"],
            url=urljoin(self.json_url, f["url"]),
            sha256=sha,
            size=int(f.get("size") or 0),
        )

    def fetch(self, release: ReleaseFile, cache_dir: Path) -> tuple[Path, bool]:
        """The verified wheel in the cache: ``(path, downloaded)``; downloads it when missing."""
        entry = Path(cache_dir) / "pypi" / release.sha256
        path = entry / release.filename
        if path.is_file():
            return path, False
        entry.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with tempfile.NamedTemporaryFile(dir=entry, prefix=".download-", delete=False) as tmp:
            try:
                try:
                    with self.session.get(release.url, stream=True, timeout=120) as response:
                        if response.status_code != 200:
                            raise PyPIError(f"{release.url}: HTTP {response.status_code}")
                        for chunk in response.iter_content(_CHUNK):
                            digest.update(chunk)
                            tmp.write(chunk)
                except requests.RequestException as exc:
                    raise PyPIError(
                        f"{release.url}: download failed ({type(exc).__name__})"
                    ) from None
                tmp.flush()
                if digest.hexdigest() != release.sha256:
                    raise PyPIError(
                        f"{release.filename}: sha256 {digest.hexdigest()} does not match PyPI's "
                        f"{release.sha256}; nothing was cached"
                    )
                os.replace(tmp.name, path)
            finally:
                if os.path.exists(tmp.name):
                    os.unlink(tmp.name)
        return path, True
