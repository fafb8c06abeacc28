"""The compile cache's integrity and trust rules (issues 32 and 39), in this process with a temporary
``EMBER_CACHE_DIR``: a library's digest covers its key (another entry's valid pair is rejected); a
directory in place of any cache file is removed and the entry rebuilt; a full filesystem moves the
cache to a private directory with one warning; cache files are never written in place; a cache
directory another user owns or can write is replaced by a private one; an entry another user owns
or can write is rejected and rebuilt; a library is checked and loaded through one open descriptor.

This machine and CI run as root, which ignores permission bits: the checks are exercised through
modes and owners set with ``chmod``/``chown`` (root may give a file away) and ``os.getuid``
monkeypatched where that is not possible."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ember._src.native.runtime import cache_files, compiler, library_check, progcache, toolchain

requires_cc = pytest.mark.skipif(toolchain.find_compiler() is None, reason="no C compiler available")
pytestmark = requires_cc

FOREIGN_UID = 54321  # no user of this machine: "another user"


def _source(tag: str, value: int) -> str:
    return f"long ember_trust_{tag}(long x) {{ return x * 1000 + {value}; }}\n"


def _call(lib: ctypes.CDLL, tag: str, x: int = 7) -> int:
    fn = getattr(lib, f"ember_trust_{tag}")
    fn.argtypes, fn.restype = [ctypes.c_long], ctypes.c_long
    return fn(x)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(d))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # where a rejected cache is replaced
    monkeypatch.setattr(cache_files, "_fallback_dirs", {})
    compiler.clear_memory_cache()
    yield d
    compiler.clear_memory_cache()


def _entry(cache: Path, source: str) -> Path:
    return cache / f"{compiler.cache_key(source)}.so"


def _reload(source: str) -> ctypes.CDLL:
    compiler.clear_memory_cache()  # the next load goes to the disk tier
    return compiler.load_library(source)


def _give_away(path: Path, monkeypatch) -> None:
    """Make ``path`` another user's: chown as root, else pretend to be someone else."""
    if os.geteuid() == 0:
        os.chown(path, FOREIGN_UID, -1, follow_symlinks=False)
    else:
        monkeypatch.setattr(os, "getuid", lambda: FOREIGN_UID)


# ----------------------------------------------------------------------------------------------
# the digest is bound to its entry's key


def test_another_entrys_valid_pair_is_rejected_and_rebuilt(cache):
    a, b = _source("pa", 1), _source("pb", 2)
    assert _call(compiler.load_library(a), "pa") == 7001
    assert _call(compiler.load_library(b), "pb") == 7002
    so_a, so_b = _entry(cache, a), _entry(cache, b)
    for suffix in ("", ".sha256"):  # b's library and digest, copied over a's (new files)
        shutil.copyfile(f"{so_b}{suffix}", f"{so_a}{suffix}.new")
        os.replace(f"{so_a}{suffix}.new", f"{so_a}{suffix}")
    before = library_check.rejected_entries()
    lib = _reload(a)
    assert _call(lib, "pa") == 7001  # a's own code, rebuilt
    assert library_check.rejected_entries() == before + 1 and compiler.cache_stats()["compiles"] == 1


def test_entry_of_an_older_digest_format_is_rebuilt_quietly(cache, caplog):
    """An intact entry whose digest file holds the older format (SHA-256 of the bytes alone) is
    rebuilt without a warning and not counted as rejected; it is not loaded either, so another
    library's bytes with their old-format digest still give this entry's own code."""
    import hashlib
    a, b = _source("old", 3), _source("oldb", 4)
    compiler.load_library(a)
    compiler.load_library(b)
    so_a, so_b = _entry(cache, a), _entry(cache, b)
    Path(f"{so_a}.sha256").write_text(hashlib.sha256(so_a.read_bytes()).hexdigest())
    before = library_check.rejected_entries()
    with caplog.at_level("WARNING", logger="ember"):
        assert _call(_reload(a), "old") == 7003
    assert library_check.rejected_entries() == before and compiler.cache_stats()["compiles"] == 1
    assert not [r for r in caplog.records if "failed verification" in r.getMessage()]
    shutil.copyfile(so_b, so_a)  # b's bytes with their old-format digest in a's place
    Path(f"{so_a}.sha256").write_text(hashlib.sha256(so_b.read_bytes()).hexdigest())
    assert _call(_reload(a), "old") == 7003 and compiler.cache_stats()["compiles"] == 1


def test_program_cache_entry_of_another_key_is_rejected(cache):
    ka, kb = "a" * 64, "b" * 64
    progcache.store(cache, ka, {"source": "int a;"})
    progcache.store(cache, kb, {"source": "int b;"})
    pa, pb = cache / "programs" / f"{ka[:40]}.json", cache / "programs" / f"{kb[:40]}.json"
    assert progcache.load(cache, ka)["source"] == "int a;"
    forged = json.loads(pb.read_text())  # b's entry under a's key, its digest recomputed the v1 way
    forged["key"] = ka
    pa.write_text(json.dumps(forged))
    assert progcache.load(cache, ka) is None and not pa.exists()
    shutil.copyfile(pb, pa)  # b's entry as it is
    assert progcache.load(cache, ka) is None
    assert progcache.load(cache, kb)["source"] == "int b;"


# ----------------------------------------------------------------------------------------------
# a directory in place of any cache file


@pytest.mark.parametrize("suffix", [".so", ".so.sha256", ".c", ".lock"])
def test_directory_in_place_of_a_cache_file_is_rebuilt(cache, suffix):
    src = _source("dir" + suffix.replace(".", "_"), 3)
    tag = "dir" + suffix.replace(".", "_")
    assert _call(compiler.load_library(src), tag) == 7003
    so = _entry(cache, src)
    target = Path(str(so)[: -len(".so")] + suffix)
    target.unlink()
    (target / "inner").mkdir(parents=True)  # not even an empty directory
    if suffix in (".c", ".lock"):  # only a build reads the source and takes the lock
        so.unlink()
    for attempt in range(2):  # rebuilt once, then served from the disk again
        assert _call(_reload(src), tag) == 7003
        assert compiler.cache_stats()["compiles"] == (1 if attempt == 0 else 0)
    assert target.is_file()


def test_directory_in_place_of_a_program_cache_entry(cache):
    key = "c" * 64
    f = cache / "programs" / f"{key[:40]}.json"
    f.mkdir(parents=True)
    assert progcache.load(cache, key) is None and not f.exists()
    f.mkdir()
    progcache.store(cache, key, {"source": "int c;"})
    assert progcache.load(cache, key)["source"] == "int c;"


# ----------------------------------------------------------------------------------------------
# a full filesystem


def _full_disk_in(directory: Path, monkeypatch) -> None:
    """Every cache write in ``directory`` fails with ENOSPC, as do compiler outputs there."""
    real_write, real_run = cache_files._atomic_write_text, toolchain._run

    def write(path, text):
        if Path(path).parent == directory:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(path, text)

    def run(cmd, timeout=toolchain.PROBE_TIMEOUT_S, nice=0):
        if "-o" in cmd and Path(cmd[cmd.index("-o") + 1]).parent == directory:
            return subprocess.CompletedProcess(cmd, 1, "", f"/usr/bin/ld: final link failed: "
                                               f"{os.strerror(errno.ENOSPC)}\n")
        return real_run(cmd, timeout, nice)

    monkeypatch.setattr(cache_files, "_atomic_write_text", write)
    monkeypatch.setattr(toolchain, "_run", run)


@pytest.mark.parametrize("where", ["source write", "compiler output"])
def test_full_disk_falls_back_to_a_private_directory_with_one_warning(cache, monkeypatch, where):
    toolchain._require_compiler()  # the probe is not the subject
    cache.mkdir(mode=0o700)
    tag = "full" + where.split()[0]
    if where == "compiler output":  # the source is already there: only the library does not fit
        cache_files._atomic_write_text(cache / f"{compiler.cache_key(_source(tag, 4))}.c", _source(tag, 4))
    _full_disk_in(cache, monkeypatch)
    with pytest.warns(RuntimeWarning, match="full filesystem") as caught:
        lib = compiler.load_library(_source(tag, 4))
    assert _call(lib, tag) == 7004 and len(caught) == 1
    assert Path(lib._name).parent != cache and cache_files.cache_dir() != cache
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per process, not one per compile
        assert _call(compiler.load_library(_source(tag + "2", 5)), tag + "2") == 7005


def test_full_disk_everywhere_is_a_clear_error(cache, monkeypatch):
    toolchain._require_compiler()

    def write(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache_files, "_atomic_write_text", write)
    with pytest.warns(RuntimeWarning, match="full filesystem"), \
            pytest.raises(compiler.CompileError, match="no space left .* nor a private directory"):
        compiler.load_library(_source("fullall", 16))


# ----------------------------------------------------------------------------------------------
# never written in place


def test_cache_files_are_never_written_in_place(cache):
    """Every write under the cache goes to a new temporary file renamed into place, so a process
    that has a library mapped keeps its bytes: recorded with an audit hook (every open for writing)
    and by the compiler's ``-o``; and the inode of a loaded library is not the rebuilt one's."""
    src = _source("inplace", 6)
    lib = compiler.load_library(src)
    so = _entry(cache, src)
    held = {p: os.open(p, os.O_RDONLY) for p in (so, Path(f"{so}.sha256"))}
    old = {p: Path(p).read_bytes() for p in held}
    # a wrong digest (put in place as a new file): the library and its digest are written again
    Path(f"{so}.sha256.new").write_text("0" * 64)
    os.replace(f"{so}.sha256.new", f"{so}.sha256")
    opened: list[tuple[str, object, int]] = []
    outputs: list[str] = []
    real_run = toolchain._run

    def run(cmd, timeout=toolchain.PROBE_TIMEOUT_S, nice=0):
        if "-o" in cmd:
            outputs.append(cmd[cmd.index("-o") + 1])
        return real_run(cmd, timeout, nice)

    _AUDIT["on"] = opened
    try:
        toolchain._run, saved = run, toolchain._run
        try:
            assert _call(_reload(src), "inplace") == 7006
        finally:
            toolchain._run = saved
    finally:
        _AUDIT["on"] = None
    assert _call(lib, "inplace") == 7006  # the first load still runs
    written = [p for p, mode, flags in opened if _writes(mode, flags) and Path(p).parent == cache]
    assert written and outputs
    for p in written + outputs:
        name = Path(p).name
        assert name.endswith((".tmp", ".lock")) or name.startswith(".write-probe-"), \
            f"{p} opened for writing in place"
    for p, fd in held.items():
        try:
            assert os.fstat(fd).st_ino != os.stat(p).st_ino  # a new file took the name
            assert os.pread(fd, 1 << 22, 0) == old[p]  # the old one is untouched
        finally:
            os.close(fd)


_AUDIT: dict[str, list | None] = {"on": None}


def _audit(event: str, args: tuple) -> None:
    sink = _AUDIT["on"]
    if sink is not None and event == "open" and isinstance(args[0], (str, os.PathLike)):
        sink.append((os.fspath(args[0]), args[1], args[2] if len(args) > 2 else 0))


def _writes(mode: object, flags: object) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR))


sys.addaudithook(_audit)  # hooks cannot be removed: this one records only while a test asks


# ----------------------------------------------------------------------------------------------
# trust: the cache directory


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
def test_cache_dir_writable_by_others_is_replaced_by_a_private_one(cache, mode):
    cache.mkdir()
    cache.chmod(mode)
    with pytest.warns(RuntimeWarning, match=r"not safe to use: .*writable \(mode") as caught:
        lib = compiler.load_library(_source("shared", 8))
    assert _call(lib, "shared") == 7008
    assert str(cache) in str(caught[0].message) and Path(lib._name).parent != cache
    assert not list(cache.iterdir())  # nothing read from it, nothing written to it
    private = Path(lib._name).parent
    assert private == cache.parent / "xdg" / "ember" and cache_files.distrust_reason(private) is None


def test_cache_dir_of_another_user_is_replaced(cache, monkeypatch):
    cache.mkdir(mode=0o700)
    _give_away(cache, monkeypatch)
    with pytest.warns(RuntimeWarning, match="is owned by uid"):
        reason = cache_files.distrust_reason(cache)
        assert reason is not None and "owned by uid" in reason
        cache_files._usable_cache_dir()


def test_parent_writable_by_others_needs_the_sticky_bit(tmp_path, monkeypatch):
    parent = tmp_path / "shared"
    (parent / "cache").mkdir(parents=True, mode=0o700)
    parent.chmod(0o777)  # anyone may rename our cache directory away and put theirs in its place
    assert "world-writable" in cache_files.distrust_reason(parent / "cache")
    parent.chmod(0o1777)  # like /tmp: others cannot rename or remove what they do not own
    assert cache_files.distrust_reason(parent / "cache") is None


def test_new_cache_files_are_private(cache):
    src = _source("modes", 9)
    compiler.load_library(src)
    so = _entry(cache, src)
    assert oct(cache.stat().st_mode & 0o777) == oct(0o700)
    assert oct(so.stat().st_mode & 0o777) == oct(0o700)
    for p in (Path(f"{so}.sha256"), so.with_suffix(".c")):
        assert oct(p.stat().st_mode & 0o777) == oct(0o600)


# ----------------------------------------------------------------------------------------------
# trust: entries


def test_entry_writable_by_others_is_rejected_and_rebuilt(cache):
    src = _source("mode666", 10)
    compiler.load_library(src)
    so = _entry(cache, src)
    so.chmod(0o666)
    before = library_check.rejected_entries()
    assert _call(_reload(src), "mode666") == 7010
    assert library_check.rejected_entries() == before + 1 and compiler.cache_stats()["compiles"] == 1
    assert so.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize("which", [".so", ".so.sha256"])
def test_entry_of_another_user_is_rejected_and_rebuilt(cache, which):
    src = _source("foreign" + which.replace(".", "_"), 11)
    tag = "foreign" + which.replace(".", "_")
    compiler.load_library(src)
    target = Path(str(_entry(cache, src)) + which[3:])
    os.chown(target, FOREIGN_UID, -1)
    assert _call(_reload(src), tag) == 7011
    assert compiler.cache_stats()["compiles"] == 1 and target.stat().st_uid == os.getuid()


def test_symlink_in_place_of_a_library_is_rejected(cache, tmp_path):
    a, b = _source("link", 12), _source("linkb", 13)
    compiler.load_library(a)
    compiler.load_library(b)
    so_a, so_b = _entry(cache, a), _entry(cache, b)
    so_a.unlink()
    so_a.symlink_to(so_b)
    shutil.copyfile(f"{so_b}.sha256", f"{so_a}.sha256")
    assert _call(_reload(a), "link") == 7012
    assert not so_a.is_symlink() and compiler.cache_stats()["compiles"] == 1


def test_program_cache_dir_or_entry_open_to_others_is_not_used(cache):
    key = "d" * 64
    progcache.store(cache, key, {"source": "int d;"})
    f = cache / "programs" / f"{key[:40]}.json"
    f.chmod(0o666)
    assert progcache.load(cache, key) is None and not f.exists()
    progcache.store(cache, key, {"source": "int d;"})
    (cache / "programs").chmod(0o777)
    assert progcache.load(cache, key) is None
    progcache.store(cache, "e" * 64, {"source": "int e;"})
    assert not (cache / "programs" / f"{'e' * 40}.json").exists()


# ----------------------------------------------------------------------------------------------
# the check and the load see one file


def test_the_load_uses_the_file_that_was_checked(cache):
    """A library swapped on disk after the check is not the one loaded: the load opens the checked
    descriptor, not the name again."""
    a, b = _source("swapa", 14), _source("swapb", 15)
    so_a = compiler.compile_shared(a)
    so_b = compiler.compile_shared(b)
    shutil.copyfile(so_b, f"{so_a}.evil")
    with library_check.opened_library(so_a) as name:
        os.replace(f"{so_a}.evil", so_a)  # b's code under a's name, after the check
        lib = ctypes.CDLL(name)
    assert _call(lib, "swapa") == 7014
    assert not hasattr(lib, "ember_trust_swapb")


def test_libraries_loaded_through_the_same_descriptor_number_stay_distinct(cache):
    """glibc answers ``dlopen`` of a name it has loaded with that library; descriptor numbers are
    reused, so each load spells its ``/proc/self/fd`` name differently."""
    libs = [compiler.load_library(_source(f"fd{i}", 20 + i)) for i in range(4)]
    assert [_call(lib, f"fd{i}") for i, lib in enumerate(libs)] == [7020, 7021, 7022, 7023]
    assert all(Path(lib._name).parent == cache for lib in libs)


def test_program_cache_is_not_read_from_a_cache_dir_open_to_others(cache):
    key = "f" * 64
    progcache.store(cache, key, {"source": "int f;"})
    assert progcache.load(cache, key)["source"] == "int f;"
    cache.chmod(0o777)  # anyone could have put this entry here
    with pytest.warns(RuntimeWarning, match="world-writable"):
        assert progcache.load(cache, key) is None
    assert cache_files.cache_dir() != cache
