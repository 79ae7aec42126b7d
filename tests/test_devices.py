"""kohaku.core.devices: native bf16 is read from the CPU's flags, not from torch's AVX512 check."""

from __future__ import annotations

from kohaku.core.devices import cpu_flags, cpu_has_native_bf16

# flag lines as /proc/cpuinfo writes them (abridged)
ZEN4 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni\n"
ICELAKE = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx512f avx512bw avx512dq avx512vl avx512_vnni\n"
SAPPHIRE = "flags\t: avx2 avx512f amx_bf16 amx_tile amx_int8\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32 bf16\n"


def test_bf16_needs_avx512_bf16_or_amx(tmp_path):
    for text, native in ((ZEN4, True), (ICELAKE, False), (SAPPHIRE, True), (ARM, False)):
        path = tmp_path / "cpuinfo"
        path.write_text(text)
        flags = cpu_flags(path)
        assert flags is not None and ("avx2" in flags or "asimd" in flags)
        assert cpu_has_native_bf16(flags) is native, text


def test_unreadable_cpuinfo_means_no_bf16(tmp_path):
    assert cpu_flags(tmp_path / "missing") is None
    (tmp_path / "empty").write_text("processor\t: 0\n")
    assert cpu_flags(tmp_path / "empty") is None
    assert cpu_has_native_bf16(frozenset()) is False
