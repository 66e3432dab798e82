"""Build the local stand-in for the production base image and push it to a local registry.

The production base (``vllm/vllm-openai-rocm:minimax-m3``) lives in a registry we cannot
reach, so tests and the demo build on a stand-in with the same layout:

1. a Debian bookworm rootfs made with ``debootstrap --variant=minbase`` (+ python3 and
   what torch needs at run time), packed into a deterministic tar (sorted names, fixed
   mtimes, numeric owners) and brought in with ``docker import``;
2. a second stage, rendered from ``dockerfiles/standin-base.Dockerfile.j2``, that COPYs a
   host-prepared site folder (torch CPU + ``requirements/vllm-runtime.txt``, installed with
   ``pip install --target``) and the pristine vLLM 0.24.0 tree into
   ``/usr/local/lib/python3.11/dist-packages/``, so ``import vllm`` works with the system
   ``/usr/bin/python3`` as it does in the real image.

The result is tagged ``m3-image/standin-base:vllm-0.24.0`` and pushed to a local registry;
the pushed manifest digest is returned. Everything slow is cached: the rootfs tar and the
site folder under ``<cache_dir>/standin/`` and the image itself in the engine (reused while
its input fingerprint label matches).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from builder.dockerfile import render_template
from builder.engine import Engine
from builder.errors import BuilderError, RegistryError
from standin.vllm_sources import VLLM_VERSION, WHEEL_SHA256, fetch_wheel, pinned, vllm_site

REPO_ROOT = Path(__file__).resolve().parents[1]
TEMPLATE_PATH = REPO_ROOT / "dockerfiles" / "standin-base.Dockerfile.j2"
RELEASE_TEMPLATE_PATH = REPO_ROOT / "dockerfiles" / "standin-release.Dockerfile.j2"
REQUIREMENTS_PATH = REPO_ROOT / "requirements" / "vllm-runtime.txt"


def extra_requirements(version: str) -> Path:
    """What a non-default release needs beyond the shared site.

    The file is requirements/vllm-runtime-<v>.txt.
    """
    return REPO_ROOT / "requirements" / f"vllm-runtime-{version}.txt"


SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# python3 is the point; libstdc++6 and libgomp1 are what the torch CPU wheel links
# against outside its own lib/ folder (libstdc++6 comes with minbase anyway).
DEBIAN_PACKAGES = ("python3", "libstdc++6", "libgomp1")
TORCH_REQUIREMENT = "torch==2.13.0"
PYTHON_TAG = "3.11"  # bookworm's python3; wheels are selected for it, not for the host
GLIBC_MINOR = 36  # bookworm ships glibc 2.36: any manylinux_2_<=36 x86_64 wheel runs there
# pip (23.x) does not widen --platform by itself: list every manylinux tag the image accepts.
WHEEL_PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MINOR, 4, -1)) + (
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
FIXED_MTIME = 1704067200  # 2024-01-01T00:00:00Z: every file in both layers gets this mtime

LOCAL_REPOSITORY = "m3-image/standin-base"
TAG = f"vllm-{VLLM_VERSION}"
LOCAL_TAG = f"{LOCAL_REPOSITORY}:{TAG}"
ROOTFS_REPOSITORY = "m3-image/standin-rootfs"
SITE_PACKAGES = f"/usr/local/lib/python{PYTHON_TAG}/dist-packages"
PYTHON = "/usr/bin/python3"
FINGERPRINT_LABEL = "org.m3-image.standin.inputs"

Log = Callable[[str], None]


@dataclass(frozen=True)
class StandinBase:
    """The stand-in base as pushed: use ``reference`` (repository@digest) in FROM lines."""

    local_tag: str
    repository: str
    digest: str
    reference: str
    vllm_root: str = f"{SITE_PACKAGES}/vllm"
    python: str = PYTHON
    image_id: str = ""
    size: int = 0
    timings: dict = field(default_factory=dict, compare=False)


# --------------------------------------------------------------------------- fingerprints


def _digest(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _rootfs_fingerprint() -> str:
    return _digest(
        {
            "suite": SUITE,
            "variant": "minbase",
            "packages": DEBIAN_PACKAGES,
            "mtime": FIXED_MTIME,
            "layout": 1,
        }
    )


def _site_fingerprint() -> str:
    return _digest(
        {
            "torch": TORCH_REQUIREMENT,
            "python": PYTHON_TAG,
            "platforms": WHEEL_PLATFORMS,
            "requirements": REQUIREMENTS_PATH.read_text(),
            "vllm_wheel": WHEEL_SHA256,
            "layout": 2,
        }
    )


def _image_fingerprint(rootfs_fp: str, site_fp: str) -> str:
    return _digest({"rootfs": rootfs_fp, "site": site_fp, "template": TEMPLATE_PATH.read_text()})


def _release_fingerprint(default_fp: str, version: str) -> str:
    """Another release's stand-in: the default base's inputs, its own extras, its template."""
    return _digest(
        {
            "default": default_fp,
            "extra": _extra_fingerprint(version),
            "template": RELEASE_TEMPLATE_PATH.read_text(),
        }
    )


def _extra_fingerprint(version: str) -> str:
    return _digest(
        {
            "version": version,
            "wheel": pinned(version)[1],
            "python": PYTHON_TAG,
            "platforms": WHEEL_PLATFORMS,
            "requirements": extra_requirements(version).read_text(),
            "layout": 1,
        }
    )


# --------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise builders sharing one cache (e.g. the CLI and a test session)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _unmount_below(root: Path) -> None:
    """Undo mounts a failed debootstrap may leave (proc, sys) before deleting its target."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/mounts") as handle:
        points = [line.split()[1] for line in handle]
    for point in sorted((p for p in points if p.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _prune_stale(keep: Path, pattern: str, log: Log) -> None:
    """Drop cache entries of earlier input fingerprints once ``keep`` is in place."""
    for path in keep.parent.glob(pattern):
        if path != keep:
            log(f"standin: removing stale cache entry {path}")
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def _remove_tree(path: Path) -> None:
    if path.exists():
        _unmount_below(path)
        shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- stage 1: rootfs

# Files that differ from run to run (logs, apt indexes, downloaded .debs) or that the
# engine provides at run time (/dev nodes, resolv.conf, hostname).
_VOLATILE = (
    "var/cache/apt/archives/*.deb",
    "var/cache/apt/*.bin",
    "var/lib/apt/lists/*",
    "var/cache/debconf/*-old",
    "var/lib/dpkg/*-old",
    "var/cache/ldconfig/aux-cache",
    "dev/*",
    "run/*",
    "tmp/*",
    "etc/hostname",
    "etc/resolv.conf",
    "etc/machine-id",
)


def _clean_rootfs(root: Path) -> None:
    for pattern in _VOLATILE:
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                if path.name != "partial":  # apt expects var/lib/apt/lists/partial
                    shutil.rmtree(path)
            else:
                path.unlink()
    for path in (root / "var" / "log").rglob("*"):  # keep the folders, drop the logs
        if path.is_file() or path.is_symlink():
            path.unlink()


def _rootfs_tar(cache: Path, log: Log, timings: dict) -> Path:
    """``<cache>/rootfs-bookworm-<fp>.tar``: debootstrap output as a deterministic tar."""
    out = cache / f"rootfs-{SUITE}-{_rootfs_fingerprint()[:12]}.tar"
    if out.is_file():
        log(f"standin: reusing rootfs {out}")
        return out
    if shutil.which("debootstrap") is None:
        raise BuilderError("debootstrap not found on PATH: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise BuilderError("debootstrap needs root to build the stand-in rootfs: run as root")
    mirror = os.environ.get("M3_DEBIAN_MIRROR", DEFAULT_MIRROR)
    work = Path(tempfile.mkdtemp(dir=cache, prefix=".rootfs-"))
    target = work / "root"
    debootstrap_log = cache / "debootstrap.log"
    try:
        log(
            f"standin: debootstrap --variant=minbase {SUITE} from {mirror} (log: {debootstrap_log})"
        )
        start = time.monotonic()
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(DEBIAN_PACKAGES)}",
            SUITE,
            str(target),
            mirror,
        ]
        with debootstrap_log.open("w") as handle:
            result = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT)
        if result.returncode != 0:
            detail = _last_line(debootstrap_log.read_text(errors="replace"))
            raise BuilderError(
                f"debootstrap {SUITE} from {mirror} failed (exit {result.returncode}): "
                f"{detail} (full log: {debootstrap_log})"
            )
        timings["debootstrap_s"] = round(time.monotonic() - start, 1)
        _unmount_below(target)
        _clean_rootfs(target)
        start = time.monotonic()
        staging = work / "rootfs.tar"
        tar_cmd = [
            "tar",
            "--create",
            "--file",
            str(staging),
            "--directory",
            str(target),
            "--format=gnu",
            "--sort=name",
            f"--mtime=@{FIXED_MTIME}",
            "--numeric-owner",
            "--one-file-system",
            ".",
        ]
        packed = subprocess.run(
            tar_cmd, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}
        )
        if packed.returncode != 0:
            raise BuilderError(f"packing the stand-in rootfs failed: {_last_line(packed.stderr)}")
        staging.replace(out)
        _prune_stale(out, f"rootfs-{SUITE}-*.tar", log)
        timings["rootfs_tar_s"] = round(time.monotonic() - start, 1)
        log(f"standin: rootfs {out} ({out.stat().st_size / 2**20:.0f} MiB)")
    finally:
        _remove_tree(work)
    return out


def _import_rootfs(engine: Engine, tar_path: Path, log: Log) -> str:
    """``docker import`` the rootfs tar (once per fingerprint); returns the image reference."""
    tag = tar_path.stem.removeprefix("rootfs-")
    reference = f"{ROOTFS_REPOSITORY}:{tag}"
    if engine.image_id(reference) is None:
        log(f"standin: docker import {tar_path.name} as {reference}")
        engine.import_image(tar_path, ROOTFS_REPOSITORY, tag)
    return reference


# --------------------------------------------------------------------------- stage 2: site


def _extract_dist_info(cache_root: Path, target: Path, version: str = VLLM_VERSION) -> None:
    """vLLM's ``.dist-info`` from the pinned wheel: the real image has vLLM pip-installed, and
    vLLM reads its own version through importlib.metadata (platform detection)."""
    prefix = f"vllm-{version}.dist-info/"
    wheel = fetch_wheel(cache_root, version)
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.startswith(prefix) and not m.endswith("/")]
        if not members:
            raise BuilderError(f"{wheel}: no {prefix} folder")
        archive.extractall(target, members)


def _pip_install_target(target: Path, args: list[str], what: str) -> None:
    """``pip install --target`` of binary wheels chosen for the image's interpreter (cp311,
    glibc 2.36), not the host's, without the console scripts (they name the host's python);
    a failure is one line naming ``what``."""
    platforms = [arg for platform in WHEEL_PLATFORMS for arg in ("--platform", platform)]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--no-warn-script-location",
        "--only-binary=:all:",
        "--python-version",
        PYTHON_TAG,
        "--implementation",
        "cp",
        *platforms,
        "--target",
        str(target),
        *args,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuilderError(f"pip install of {what} failed: {_last_line(result.stderr)}")
    shutil.rmtree(target / "bin", ignore_errors=True)


def _site_dir(cache_dir: Path, cache: Path, log: Log, timings: dict) -> Path:
    """``<cache>/site-<fp>/``: torch + vLLM runtime deps for cp311, laid out as dist-packages,
    plus vLLM's dist-info (its ``vllm/`` tree comes from ``vllm_site`` at build time)."""
    site = cache / f"site-{_site_fingerprint()[:12]}"
    if site.is_dir():
        log(f"standin: reusing site folder {site}")
        return site
    start = time.monotonic()
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=".site-"))
    try:
        target = staging / "site"
        log(f"standin: pip install --target (torch + {REQUIREMENTS_PATH.name})")
        _pip_install_target(
            target,
            [TORCH_REQUIREMENT, "-r", str(REQUIREMENTS_PATH)],
            "the stand-in site folder",
        )
        if (target / "vllm").exists():
            raise BuilderError(
                "a requirement pulled in vllm itself; the stand-in must use the pinned sources"
            )
        _extract_dist_info(cache_dir, target)
        staging.joinpath("site").replace(site)
        _prune_stale(site, "site-*", log)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    timings["site_s"] = round(time.monotonic() - start, 1)
    log(f"standin: site folder {site} ready in {timings['site_s']}s")
    return site


def _extra_site_dir(cache_dir: Path, cache: Path, version: str, log: Log, timings: dict) -> Path:
    """``<cache>/site-extra-<version>-<fp>/``: what release ``version`` imports beyond the shared
    site (pip --no-deps, the complete list is in its requirements file) + its own dist-info.
    It becomes one layer on top of the shared site's, which is reused unchanged."""
    site = cache / f"site-extra-{version}-{_extra_fingerprint(version)[:12]}"
    if site.is_dir():
        log(f"standin: reusing {site}")
        return site
    start = time.monotonic()
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=".site-extra-"))
    try:
        target = staging / "site"
        requirements = extra_requirements(version)
        log(f"standin: pip install --target --no-deps ({requirements.name})")
        _pip_install_target(target, ["--no-deps", "-r", str(requirements)], requirements.name)
        _extract_dist_info(cache_dir, target, version)
        target.replace(site)
        _prune_stale(site, f"site-extra-{version}-*", log)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    timings["extra_site_s"] = round(time.monotonic() - start, 1)
    return site


# --------------------------------------------------------------------------- build context


def _tar_entry(archive: tarfile.TarFile, path: Path, arcname: str) -> None:
    info = tarfile.TarInfo(arcname)
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    stat = path.lstat()
    if path.is_symlink():
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(path)
        info.mode = 0o777
        archive.addfile(info)
    elif path.is_dir():
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        archive.addfile(info)
    else:
        info.size = stat.st_size
        info.mode = 0o755 if stat.st_mode & 0o111 else 0o644
        with path.open("rb") as handle:
            archive.addfile(info, handle)


def _walk_sorted(root: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        base = Path(dirpath)
        if base != root:
            yield base
        for name in sorted(filenames):
            if not name.endswith(".pyc"):
                yield base / name


def write_context(handle, dockerfile: str, trees: dict[str, Path]) -> None:
    """A build context tar with sorted names, fixed mtimes and root ownership."""
    with tarfile.open(fileobj=handle, mode="w", format=tarfile.GNU_FORMAT) as archive:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size, info.mtime, info.mode = len(data), FIXED_MTIME, 0o644
        archive.addfile(info, io.BytesIO(data))
        for name, root in sorted(trees.items()):
            _tar_entry(archive, root, name)
            for path in _walk_sorted(root):
                _tar_entry(archive, path, f"{name}/{path.relative_to(root).as_posix()}")


def render_dockerfile(**values: str) -> str:
    return render_template(TEMPLATE_PATH.name, **values)


def _build_image(
    engine: Engine,
    rootfs_image: str,
    site: Path,
    vllm_tree: Path,
    fingerprint: str,
    cache: Path,
    log: Log,
) -> str:
    dockerfile = render_dockerfile(
        rootfs_image=rootfs_image,
        site_packages=SITE_PACKAGES,
        python=PYTHON,
        vllm_version=VLLM_VERSION,
        suite=SUITE,
        fingerprint_label=FINGERPRINT_LABEL,
        fingerprint=fingerprint,
    )
    return _build(engine, dockerfile, {"site": site, "vllm": vllm_tree}, LOCAL_TAG, cache, log)


def _build_release_image(
    engine: Engine,
    default_base: str,
    version: str,
    extra_site: Path,
    vllm_tree: Path,
    fingerprint: str,
    cache: Path,
    log: Log,
) -> str:
    dockerfile = render_template(
        RELEASE_TEMPLATE_PATH.name,
        default_base=default_base,
        site_packages=SITE_PACKAGES,
        python=PYTHON,
        vllm_version=version,
        shared_version=VLLM_VERSION,
        suite=SUITE,
        fingerprint_label=FINGERPRINT_LABEL,
        fingerprint=fingerprint,
    )
    return _build(
        engine,
        dockerfile,
        {"site-extra": extra_site, "vllm": vllm_tree},
        local_tag_for(version),
        cache,
        log,
    )


def _build(
    engine: Engine, dockerfile: str, trees: dict[str, Path], local_tag: str, cache: Path, log: Log
) -> str:
    with tempfile.TemporaryFile(dir=cache, prefix=".context-") as context:
        write_context(context, dockerfile, trees)
        log(f"standin: build context {context.tell() / 2**20:.0f} MiB; building {local_tag}")
        context.seek(0)

        def show_steps(line: str) -> None:
            if line.startswith("Step "):
                log(f"standin:   {line}")

        # network_mode none: the build is hermetic, nothing is fetched
        return engine.build(context, "Dockerfile", local_tag, show_steps, network_mode="none")


def local_tag_for(version: str) -> str:
    return f"{LOCAL_REPOSITORY}:vllm-{version}"


# --------------------------------------------------------------------------- push


def check_registry(registry: str) -> None:
    url = f"http://{registry}/v2/"
    try:
        with urllib.request.urlopen(url, timeout=5):
            return
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise RegistryError(
                f"registry {registry} demands credentials; the stand-in goes to "
                f"the plain registry (scripts/start-registry.sh)"
            ) from exc
        raise RegistryError(f"registry {registry}: GET /v2/ answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RegistryError(
            f"registry {registry} unreachable ({reason}): start it with scripts/start-registry.sh"
        ) from exc


def push(engine: Engine, image_id: str, repository: str, tag: str, log: Log) -> str:
    """Tag and push; returns the manifest digest (errors inside the push stream raise)."""
    engine.tag(image_id, repository, tag)
    digest = engine.push(repository, tag)
    log(f"standin: pushed {repository}@{digest}")
    return digest


# --------------------------------------------------------------------------- entry point


def labels_of(engine: Engine, reference: str) -> dict[str, str] | None:
    """The image's labels, or None when the engine has no such image."""
    image_id = engine.image_id(reference)
    if image_id is None:
        return None
    return engine.inspect(image_id)["Config"].get("Labels") or {}


def build_standin_base(
    engine: Engine,
    cache_dir: Path,
    registry: str = "127.0.0.1:5000",
    log: Log = print,
    version: str = VLLM_VERSION,
) -> StandinBase:
    """Build (or reuse) ``m3-image/standin-base:vllm-<version>`` (0.24.0 by default) and push it
    to ``registry``. Another release is built on top of the default base, which it reuses whole:
    its extra packages (``requirements/vllm-runtime-<version>.txt``) and its own vLLM tree.

    ``cache_dir`` is the build cache root (``build/cache``): the vLLM wheel lives under it
    as ``vllm_site`` lays it out, and the rootfs tar and the site folder under
    ``<cache_dir>/standin/``. Everything goes through the builder's :class:`Engine`.
    Raises :class:`BuilderError` (one line) on any failure.
    """
    pinned(version)  # an unknown release fails before any work
    if version != VLLM_VERSION:
        default = build_standin_base(engine, cache_dir, registry, log)
        return _build_release(engine, Path(cache_dir), registry, log, version, default)
    cache_dir = Path(cache_dir)
    cache = cache_dir / "standin"
    cache.mkdir(parents=True, exist_ok=True)
    timings: dict = {}
    repository = f"{registry}/{LOCAL_REPOSITORY}"
    check_registry(registry)
    with _locked(cache / ".lock"):
        rootfs_fp, site_fp = _rootfs_fingerprint(), _site_fingerprint()
        fingerprint = _image_fingerprint(rootfs_fp, site_fp)
        labels = labels_of(engine, LOCAL_TAG)
        if labels is not None and labels.get(FINGERPRINT_LABEL) != fingerprint:
            log(f"standin: {LOCAL_TAG} exists but was built from other inputs; rebuilding")
            labels = None
        if labels is not None:
            image_id = engine.image_id(LOCAL_TAG)
            assert image_id is not None  # labels_of found the tag
            log(f"standin: reusing {LOCAL_TAG} ({image_id[7:19]})")
        else:
            tar_path = _rootfs_tar(cache, log, timings)
            rootfs_image = _import_rootfs(engine, tar_path, log)
            site = _site_dir(cache_dir, cache, log, timings)
            vllm_tree = vllm_site(cache_dir) / "vllm"
            start = time.monotonic()
            image_id = _build_image(engine, rootfs_image, site, vllm_tree, fingerprint, cache, log)
            timings["image_build_s"] = round(time.monotonic() - start, 1)
        start = time.monotonic()
        digest = push(engine, image_id, repository, TAG, log)
        timings["push_s"] = round(time.monotonic() - start, 1)
    size = int(engine.inspect(image_id).get("Size") or 0)
    return StandinBase(
        local_tag=LOCAL_TAG,
        repository=repository,
        digest=digest,
        reference=f"{repository}@{digest}",
        image_id=image_id,
        size=size,
        timings=timings,
    )


def _build_release(
    engine: Engine, cache_dir: Path, registry: str, log: Log, version: str, default: StandinBase
) -> StandinBase:
    """``m3-image/standin-base:vllm-<version>`` on top of the default base (by digest)."""
    cache = cache_dir / "standin"
    timings: dict = {}
    local_tag, tag = local_tag_for(version), f"vllm-{version}"
    default_fp = (engine.inspect(default.image_id)["Config"].get("Labels") or {}).get(
        FINGERPRINT_LABEL, ""
    )
    with _locked(cache / ".lock"):
        fingerprint = _release_fingerprint(default_fp, version)
        labels = labels_of(engine, local_tag)
        if labels is not None and labels.get(FINGERPRINT_LABEL) != fingerprint:
            log(f"standin: {local_tag} exists but was built from other inputs; rebuilding")
            labels = None
        found = engine.image_id(local_tag) if labels is not None else None
        if found is not None:
            image_id = found
            log(f"standin: reusing {local_tag} ({image_id[7:19]})")
        else:
            extra = _extra_site_dir(cache_dir, cache, version, log, timings)
            vllm_tree = vllm_site(cache_dir, version) / "vllm"
            start = time.monotonic()
            image_id = _build_release_image(
                engine, default.reference, version, extra, vllm_tree, fingerprint, cache, log
            )
            timings["image_build_s"] = round(time.monotonic() - start, 1)
        start = time.monotonic()
        digest = push(engine, image_id, default.repository, tag, log)
        timings["push_s"] = round(time.monotonic() - start, 1)
    return StandinBase(
        local_tag=local_tag,
        repository=default.repository,
        digest=digest,
        reference=f"{default.repository}@{digest}",
        image_id=image_id,
        size=int(engine.inspect(image_id).get("Size") or 0),
        timings=timings,
    )
