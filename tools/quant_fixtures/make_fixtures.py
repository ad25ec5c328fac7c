#!/usr/bin/python3
"""Writes reference dequantizations for tests/quant/ggufpy_fixture_test.cpp.

For every quantized GGUF type gguf-py can dequantize, random blocks (random
bytes, with their f16 scale fields set to finite values around 0.01) and the
floats gguf-py's numpy dequantizer makes of them:
  OUT/<type>.blocks  the raw blocks
  OUT/<type>.f32     the dequantized values, little-endian float32
Run with Debian's python3 and python3-numpy (scripts/fetch_quant_fixtures.sh):
  /usr/bin/python3 make_fixtures.py GGUF_PY_DIR OUT
where GGUF_PY_DIR holds gguf/{constants,lazy,quants}.py.
"""
import os
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
from gguf import quants  # noqa: E402
from gguf.constants import GGMLQuantizationType as T, GGML_QUANT_SIZES  # noqa: E402

# Byte offsets of each type's f16 scale fields; random bytes there could be
# NaN (whose payload the two sides need not agree on) or huge.
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.TQ1_0: [52], T.TQ2_0: [64], T.MXFP4: [],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0],
    T.IQ1_S: [0], T.IQ1_M: [], T.IQ4_NL: [0], T.IQ4_XS: [0],
}
# Blocks per type: enough that random indices reach (nearly) every entry of
# the largest grid (IQ1_S: 2048 entries, 32 draws a block).
N_BLOCKS = 512


def random_scales(rng, count):
    return (rng.standard_normal(count).astype(np.float32) * np.float32(0.01)).astype(np.float16)


def main():
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261126)
    for qtype, fields in F16_FIELDS.items():
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        blocks = rng.integers(0, 256, size=(N_BLOCKS, type_size), dtype=np.uint8)
        for off in fields:
            blocks[:, off:off + 2] = random_scales(rng, N_BLOCKS).view(np.uint8).reshape(N_BLOCKS, 2)
        if qtype == T.IQ1_M:
            # The f16 scale lives in the top nibbles of the 4 u16 scale words.
            bits = random_scales(rng, N_BLOCKS).view(np.uint16)
            words = blocks[:, 48:56].copy().view(np.uint16)
            for k in range(4):
                words[:, k] = (words[:, k] & 0x0FFF) | (((bits >> (4 * k)) & 0xF) << 12)
            blocks[:, 48:56] = words.view(np.uint8)
        with np.errstate(over="ignore"):  # MXFP4's largest exponents overflow to inf, on both sides
            values = quants.dequantize(blocks.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
        assert values.size == N_BLOCKS * block_size, qtype.name
        name = qtype.name.lower().replace("_k", "_K")
        blocks.tofile(os.path.join(out, name + ".blocks"))
        values.astype("<f4").tofile(os.path.join(out, name + ".f32"))
    print("make_fixtures: %d types x %d blocks in %s" % (len(F16_FIELDS), N_BLOCKS, out))


if __name__ == "__main__":
    main()
