"""XXH64 (seed 0) as catchat writes it into files: 16 lowercase hex digits.

    from xxh64 import xxh64_hex, Xxh64, XxhashMissing
    xxh64_hex(b"...")                      # one buffer
    h = Xxh64(); h.update(a); h.update(b)  # or in pieces; h.hexdigest()

The digest comes from the `xxhash` Python module where it is installed, else
from libxxhash, the library catchat itself links, through ctypes: never from
a hash written here, so it is catchat's digest by construction. Without
either, the first call raises XxhashMissing (importing this module never
does, so a caller that can do without the hash still runs).
"""
import ctypes
import ctypes.util

try:
    import xxhash as _xxhash
except ImportError:
    _xxhash = None


class XxhashMissing(RuntimeError):
    """Neither the xxhash module nor libxxhash could be loaded."""


_lib = None


def _libxxhash():
    """libxxhash with its XXH64 functions typed (the defaults would cut the
    64-bit digest and the state pointer to a C int)."""
    global _lib
    if _lib is None:
        for name in (ctypes.util.find_library("xxhash"), "libxxhash.so.0"):
            try:
                lib = ctypes.CDLL(name) if name else None
            except OSError:
                lib = None
            if lib is not None and hasattr(lib, "XXH64_createState"):
                break
        else:
            raise XxhashMissing("xxh64 needs the xxhash Python module or libxxhash: "
                                "pip install xxhash, or install the libxxhash0 package")
        u64, ptr = ctypes.c_ulonglong, ctypes.c_void_p
        lib.XXH64.restype, lib.XXH64.argtypes = u64, [ctypes.c_char_p, ctypes.c_size_t, u64]
        lib.XXH64_createState.restype, lib.XXH64_createState.argtypes = ptr, []
        lib.XXH64_reset.restype, lib.XXH64_reset.argtypes = ctypes.c_int, [ptr, u64]
        lib.XXH64_update.restype, lib.XXH64_update.argtypes = ctypes.c_int, [ptr, ctypes.c_char_p, ctypes.c_size_t]
        lib.XXH64_digest.restype, lib.XXH64_digest.argtypes = u64, [ptr]
        lib.XXH64_freeState.restype, lib.XXH64_freeState.argtypes = ctypes.c_int, [ptr]
        _lib = lib
    return _lib


def xxh64_hex(data):
    """XXH64 (seed 0) of a bytes-like object, as 16 lowercase hex digits."""
    if _xxhash is not None:
        return _xxhash.xxh64(data, seed=0).hexdigest()
    data = bytes(data)  # c_char_p takes bytes without a copy; anything else is copied once
    return "%016x" % _libxxhash().XXH64(data, len(data), 0)


class Xxh64:
    """Streaming XXH64 (seed 0): a file hashed in pieces gives xxh64_hex of the whole."""

    def __init__(self):
        self._h = self._state = None
        if _xxhash is not None:
            self._h = _xxhash.xxh64(seed=0)
            return
        lib = _libxxhash()
        self._state = lib.XXH64_createState()
        if not self._state:
            raise MemoryError("XXH64_createState failed")
        lib.XXH64_reset(self._state, 0)

    def update(self, data):
        if self._h is not None:
            self._h.update(data)
        else:
            data = bytes(data)
            _lib.XXH64_update(self._state, data, len(data))
        return self

    def hexdigest(self):
        if self._h is not None:
            return self._h.hexdigest()
        return "%016x" % _lib.XXH64_digest(self._state)

    def __del__(self):
        if getattr(self, "_state", None) and _lib is not None:  # _lib may be gone at exit
            _lib.XXH64_freeState(self._state)
            self._state = None
