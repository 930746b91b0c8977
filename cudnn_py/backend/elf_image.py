"""A minimal ELF64 shared-object writer, in Python: what the libcuda stand-in (:mod:`.driver_standin`) is made of,
with no compiler, linker or assembler.

The object is the smallest one glibc's dynamic loader (``ld.so``) accepts and ``dlopen``/``dlsym`` resolve
symbols from: a few functions of hand-assembled machine code (each returning a constant, or storing the address of a
read-only string through its second argument), exported by name, under a ``DT_SONAME``. It has no relocations and
no imports (the code reaches its one datum PC-relatively), so it needs nothing from the loader but mapping.

File layout (offsets; the first segment is mapped at address == offset, the second one :data:`SEGMENT_ALIGN` higher)::

    0x000  ELF header                      \\
    0x040  program headers (4)              |
           .hash    SysV hash table         |  PT_LOAD #1: read + execute, file offset 0 at address 0
           .dynsym  symbol table            |
           .dynstr  names and the soname    |
           .text    the functions           |
           .rodata  the string              /
           .dynamic                         -- PT_LOAD #2: read + write (and PT_DYNAMIC); address = offset + 64 KiB
           .shstrtab, section headers       -- not loaded: only for tools (readelf, objdump); ld.so ignores them

Why each piece:

* ``PT_LOAD`` x2: code must be executable and ``.dynamic`` writable (glibc before 2.35 adds the load address to
  the pointers of ``.dynamic`` in place, so a read-only one would fault); a single RWX segment is refused by
  hardened kernels. The 64 KiB segment alignment holds for 4, 16 and 64 KiB pages (aarch64 kernels use all three):
  ld.so needs ``p_vaddr - p_offset`` to be a multiple of the page size and ``p_align`` of it.
* ``PT_DYNAMIC``: where ld.so finds ``DT_HASH``, ``DT_SYMTAB``, ``DT_STRTAB``, ``DT_STRSZ``, ``DT_SYMENT`` and
  ``DT_SONAME``. The soname is what makes a later ``dlopen("libcuda.so.1")`` (cuDNN's, for its engine libraries)
  find this object already loaded instead of searching the disk.
* ``DT_HASH`` (the SysV hash table) suffices for glibc's symbol lookup; ``DT_GNU_HASH`` is optional and omitted.
* ``PT_GNU_STACK`` without the execute flag: otherwise loading the object would make the process's stacks
  executable (or, on recent glibc, be refused).

Only x86_64 and aarch64 (little-endian) are written (:func:`machine`); anything else raises
:class:`UnsupportedMachine`.
"""
from __future__ import annotations

import os
import struct
import sys
from collections.abc import Callable, Sequence

from ..errors import CudnnPyError, InvalidValueError


class UnsupportedMachine(CudnnPyError, RuntimeError):
    """The machine is one this writer has no machine code for (only x86_64 and aarch64 are written)."""


# e_machine of the two machines written
EM_X86_64, EM_AARCH64 = 62, 183
MACHINES = {"x86_64": EM_X86_64, "aarch64": EM_AARCH64}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}

SEGMENT_ALIGN = 0x10000  # 64 KiB: a multiple of every page size of both machines
_EHDR, _PHDR, _SHDR, _SYM, _DYN = 64, 56, 64, 24, 16  # sizes of the ELF64 structures

# constants of the ELF specification and its GNU extensions
ET_DYN = 3
PT_LOAD, PT_DYNAMIC, PT_GNU_STACK = 1, 2, 0x6474E551
PF_X, PF_W, PF_R = 1, 2, 4
DT_NULL, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT, DT_SONAME = 0, 4, 5, 6, 10, 11, 14
SHT_PROGBITS, SHT_STRTAB, SHT_HASH, SHT_DYNAMIC, SHT_DYNSYM = 1, 3, 5, 6, 11
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 2, 4
STB_GLOBAL, STT_FUNC = 1, 2

# A function's body: given its own address and the address of the read-only data, its machine code.
Body = Callable[[int, int], bytes]


def machine(name: str | None = None) -> str:
    """The machine to write for: ``name``, else this one (``os.uname().machine``), as "x86_64" or "aarch64";
    :class:`UnsupportedMachine` for any other (including a big-endian aarch64)."""
    raw = name or os.uname().machine
    m = _ALIASES.get(raw, raw)
    if m not in MACHINES or (name is None and (sys.byteorder != "little" or sys.maxsize < 2**32)):
        raise UnsupportedMachine(
            f"cannot write a shared object for this machine ({raw!r}, {sys.byteorder}-endian): only x86_64 and "
            "little-endian aarch64 machine code is written")
    return m


# ---------------------------------------------------------------------------------------------- machine code
# x86_64 (System V ABI: the 2nd argument in rsi, the result in eax/rax) and aarch64 (AAPCS64: the 2nd argument in
# x1, the result in w0/x0). Every instruction below is written out with its encoding.

def _a64(*words: int) -> bytes:
    """aarch64 instructions: each a 32-bit little-endian word."""
    return b"".join(struct.pack("<I", w) for w in words)


_A64_RET = 0xD65F03C0  # ret (to x30)


def _a64_movz_w0(imm16: int, shift: int = 0) -> int:
    """``movz w0, #imm16, lsl #shift``: 0 10 100101 hw imm16 Rd (sf=0: the upper 32 bits of x0 are cleared)."""
    return 0x52800000 | (shift // 16) << 21 | (imm16 & 0xFFFF) << 5


def _a64_movk_w0(imm16: int, shift: int) -> int:
    """``movk w0, #imm16, lsl #shift``: 0 11 100101 hw imm16 Rd (keeps the other half)."""
    return 0x72800000 | (shift // 16) << 21 | (imm16 & 0xFFFF) << 5


def returns(m: str, value: int) -> Body:
    """A function that returns ``value`` (0 <= value < 2**32, zero-extended: an int, or a size_t) and does nothing
    else."""
    if not 0 <= value < 2**32:
        raise InvalidValueError(f"returns({value}): only a 32-bit unsigned constant is written")

    def body(pc: int, data: int) -> bytes:
        if m == "x86_64":
            # B8 imm32  mov eax, imm32   (writing eax clears the upper half of rax)
            # C3        ret
            return b"\xb8" + struct.pack("<I", value) + b"\xc3"
        words = [_a64_movz_w0(value & 0xFFFF)]  # movz w0, #low16
        if value >> 16:
            words.append(_a64_movk_w0(value >> 16, 16))  # movk w0, #high16, lsl #16
        return _a64(*words, _A64_RET)

    return body


def stores_data_address(m: str, offset: int = 0, result: int = 0) -> Body:
    """A function ``f(a, T **out)`` that stores the address of the read-only data (plus ``offset``) in ``*out``
    when ``out`` is not NULL, and returns ``result`` (0 or a small constant)."""
    if not 0 <= result < 2**16:
        raise InvalidValueError(f"stores_data_address(result={result}): only a 16-bit constant is written")

    def body(pc: int, data: int) -> bytes:
        target = data + offset
        if m == "x86_64":
            # 48 8D 05 rel32   lea rax, [rip + rel32]   rel32 counted from the end of this 7-byte instruction
            # 48 85 F6         test rsi, rsi
            # 74 03            je +3                    (over the store)
            # 48 89 06         mov [rsi], rax
            # B8 imm32         mov eax, result
            # C3               ret
            rel = target - (pc + 7)
            return (b"\x48\x8d\x05" + struct.pack("<i", rel) + b"\x48\x85\xf6" + b"\x74\x03" + b"\x48\x89\x06"
                    + b"\xb8" + struct.pack("<I", result) + b"\xc3")
        # adr x2, target : 0 immlo 10000 immhi Rd, the 21-bit offset from this instruction (immlo its low 2 bits)
        rel = target - pc
        if not -(1 << 20) <= rel < (1 << 20):
            raise InvalidValueError("the data is out of adr's reach")
        adr = 0x10000000 | (rel & 3) << 29 | ((rel >> 2) & 0x7FFFF) << 5 | 2
        cbz = 0xB4000000 | (8 // 4) << 5 | 1  # cbz x1, +8  : 1 011010 0 imm19 Rt (skips the store when out is NULL)
        str_ = 0xF9000000 | 1 << 5 | 2  # str x2, [x1] : 11 111 0 01 00 imm12=0 Rn=x1 Rt=x2
        return _a64(adr, cbz, str_, _a64_movz_w0(result), _A64_RET)

    return body


# ------------------------------------------------------------------------------------------------------- writer
def sysv_hash(name: bytes) -> int:
    """The SysV ELF hash of a symbol name (the System V ABI's ``elf_hash``)."""
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def shared_object(soname: str, functions: Sequence[tuple[str, Body]], rodata: bytes, m: str) -> bytes:
    """The bytes of an ELF64 little-endian shared object for machine ``m`` ("x86_64" or "aarch64") named
    ``soname``, exporting ``functions`` (name, body) as global functions, with ``rodata`` as its read-only data."""
    if m not in MACHINES:
        raise UnsupportedMachine(f"no machine code for {m!r}: only {', '.join(MACHINES)}")
    names = [n.encode() for n, _ in functions]
    nsym = len(names) + 1  # symbol 0 is the reserved null symbol

    # .dynstr: a leading NUL (the empty name), the soname, then each function's name
    dynstr = bytearray(b"\0")
    soname_off = len(dynstr)
    dynstr += soname.encode() + b"\0"
    name_off = []
    for n in names:
        name_off.append(len(dynstr))
        dynstr += n + b"\0"

    # the first segment's pieces, in order (each offset == its address)
    phnum = 4
    hash_off = _EHDR + _PHDR * phnum
    nbucket = max(1, len(names))
    hash_size = 4 * (2 + nbucket + nsym)
    dynsym_off = _align(hash_off + hash_size, 8)
    dynstr_off = dynsym_off + _SYM * nsym
    text_off = _align(dynstr_off + len(dynstr), 16)
    # every function at a 16-byte boundary; its code may depend on its own address and the data's, so lay out the
    # functions with a first pass (sizes do not depend on addresses), then emit them at their final place
    sizes = [len(body(0, 0)) for _, body in functions]
    starts, at = [], text_off
    for size in sizes:
        starts.append(at)
        at = _align(at + size, 16)
    text_end = starts[-1] + sizes[-1] if starts else text_off
    rodata_off = _align(text_end, 16)
    load1_end = rodata_off + len(rodata)
    # the second segment: .dynamic, at a file offset in the same 64 KiB "page" relation as its address
    dynamic_off = _align(load1_end, 16)
    dynamic_addr = dynamic_off + SEGMENT_ALIGN
    dyn = [(DT_HASH, hash_off), (DT_STRTAB, dynstr_off), (DT_SYMTAB, dynsym_off), (DT_STRSZ, len(dynstr)),
           (DT_SYMENT, _SYM), (DT_SONAME, soname_off), (DT_NULL, 0)]
    dynamic = b"".join(struct.pack("<qQ", tag, val) for tag, val in dyn)
    # not loaded: the section names, then the section headers
    sections = [".hash", ".dynsym", ".dynstr", ".text", ".rodata", ".dynamic", ".shstrtab"]
    shstrtab = bytearray(b"\0")
    sh_name: dict[str, int] = {}
    for section in sections:
        sh_name[section] = len(shstrtab)
        shstrtab += section.encode() + b"\0"
    shstrtab_off = dynamic_off + len(dynamic)
    shoff = _align(shstrtab_off + len(shstrtab), 8)
    shnum = len(sections) + 1
    text_index = 1 + sections.index(".text")

    out = bytearray(shoff + _SHDR * shnum)
    # ELF header. e_ident: magic, ELFCLASS64 (2), ELFDATA2LSB (1), EV_CURRENT (1), ELFOSABI_SYSV (0), ABI version 0
    ident = b"\x7fELF" + bytes([2, 1, 1, 0, 0]) + bytes(7)
    struct.pack_into("<16sHHIQQQIHHHHHH", out, 0, ident, ET_DYN, MACHINES[m], 1,
                     0,  # e_entry: none
                     _EHDR, shoff, 0,  # e_phoff, e_shoff, e_flags
                     _EHDR, _PHDR, phnum, _SHDR, shnum, shnum - 1)  # sizes, counts, e_shstrndx (.shstrtab: last)
    # program headers: (type, flags, offset, vaddr, paddr, filesz, memsz, align)
    phdrs = [
        (PT_LOAD, PF_R | PF_X, 0, 0, 0, load1_end, load1_end, SEGMENT_ALIGN),
        (PT_LOAD, PF_R | PF_W, dynamic_off, dynamic_addr, dynamic_addr, len(dynamic), len(dynamic), SEGMENT_ALIGN),
        (PT_DYNAMIC, PF_R | PF_W, dynamic_off, dynamic_addr, dynamic_addr, len(dynamic), len(dynamic), 8),
        (PT_GNU_STACK, PF_R | PF_W, 0, 0, 0, 0, 0, 16),
    ]
    for i, ph in enumerate(phdrs):
        struct.pack_into("<IIQQQQQQ", out, _EHDR + i * _PHDR, *ph)
    # .hash: nbucket, nchain (= the number of symbols), the buckets, the chains. bucket[h % nbucket] is the first
    # symbol of that hash class, chain[i] the next one after symbol i (0 ends a chain)
    bucket, chain = [0] * nbucket, [0] * nsym
    for i, n in enumerate(names, start=1):
        b = sysv_hash(n) % nbucket
        chain[i], bucket[b] = bucket[b], i
    struct.pack_into(f"<II{nbucket}I{nsym}I", out, hash_off, nbucket, nsym, *bucket, *chain)
    # .dynsym: (st_name, st_info, st_other, st_shndx, st_value, st_size); symbol 0 stays all zero
    for i, (off, start, size) in enumerate(zip(name_off, starts, sizes), start=1):
        struct.pack_into("<IBBHQQ", out, dynsym_off + i * _SYM, off, STB_GLOBAL << 4 | STT_FUNC, 0, text_index,
                         start, size)
    out[dynstr_off:dynstr_off + len(dynstr)] = dynstr
    for (_, body), start, size in zip(functions, starts, sizes):
        code = body(start, rodata_off)
        assert len(code) == size
        out[start:start + size] = code
    out[rodata_off:load1_end] = rodata
    out[dynamic_off:dynamic_off + len(dynamic)] = dynamic
    out[shstrtab_off:shstrtab_off + len(shstrtab)] = shstrtab
    # section headers: (name, type, flags, addr, offset, size, link, info, addralign, entsize); index 0 is null
    dynsym_index, dynstr_index = 1 + sections.index(".dynsym"), 1 + sections.index(".dynstr")
    shdrs = [
        (sh_name[".hash"], SHT_HASH, SHF_ALLOC, hash_off, hash_off, hash_size, dynsym_index, 0, 8, 4),
        (sh_name[".dynsym"], SHT_DYNSYM, SHF_ALLOC, dynsym_off, dynsym_off, _SYM * nsym, dynstr_index, 1, 8, _SYM),
        (sh_name[".dynstr"], SHT_STRTAB, SHF_ALLOC, dynstr_off, dynstr_off, len(dynstr), 0, 0, 1, 0),
        (sh_name[".text"], SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, text_off, text_off, text_end - text_off, 0, 0,
         16, 0),
        (sh_name[".rodata"], SHT_PROGBITS, SHF_ALLOC, rodata_off, rodata_off, len(rodata), 0, 0, 16, 0),
        (sh_name[".dynamic"], SHT_DYNAMIC, SHF_ALLOC | SHF_WRITE, dynamic_addr, dynamic_off, len(dynamic),
         dynstr_index, 0, 8, _DYN),
        (sh_name[".shstrtab"], SHT_STRTAB, 0, 0, shstrtab_off, len(shstrtab), 0, 0, 1, 0),
    ]
    for i, sh in enumerate(shdrs, start=1):
        struct.pack_into("<IIQQQQIIQQ", out, shoff + i * _SHDR, *sh)
    return bytes(out)
