"""The compute dtype a CPU engine gets when its config names none (engines.cpu_dtype)."""

from specrag_batch.engines.engine import cpu_dtype

AVX2 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx f16c fma avx2 bmi2\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"


def test_float32_without_native_bf16_units():
    assert cpu_dtype(AVX2) == "float32"


def test_bfloat16_with_avx512_bf16_or_amx():
    assert cpu_dtype(SAPPHIRE_RAPIDS) == "bfloat16"
    assert cpu_dtype(ZEN4) == "bfloat16"


def test_unknown_cpu_is_float32():
    assert cpu_dtype("") == "float32"  # unreadable /proc/cpuinfo, or not x86
    assert cpu_dtype("Features\t: fp asimd bf16\n") == "float32"  # arm: no 'flags' line


def test_flag_names_match_whole_words():
    assert cpu_dtype("flags\t\t: avx512_bf16x\n") == "float32"
