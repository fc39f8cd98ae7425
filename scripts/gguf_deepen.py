#!/usr/bin/env python3
"""A deeper GGUF from a shallow one: its decoder blocks repeated, in order, to --layers blocks.

    scripts/gguf_deepen.py IN.gguf OUT.gguf --layers 16

Converting and quantizing a synthetic checkpoint with llama.cpp's own tools (scripts/checkpoint_to_gguf.py) takes
about 10 minutes a 4-layer Qwen3-30B-A3B shape on 2 shared cores and needs the bf16 checkpoint on disk (1.2 GB a
layer); a speed check that needs a model deeper than its memory limit can instead repeat an existing file's blocks:
blk.i of the output is blk.(i mod n) of the input, every tensor's bytes copied as stored (quantized types
unchanged), `<arch>.block_count` set to --layers, every other key and tensor copied. Each output block has its own
bytes in the file (no page is shared between blocks), so both engines read it as they would a deeper model; only
the weights repeat. Needs the gguf package (the one llama-cpp-python's venv has).
"""
import argparse
import re
import sys

import gguf

BLOCK = re.compile(r"^blk\.(\d+)\.(.*)$")


def copy_metadata(reader, writer, arch, layers):
    """Copies every key but the virtual ones and the architecture (the writer writes those), block_count replaced."""
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == f"{arch}.block_count":
            value = layers
        writer.add_key_value(field.name, value, val_type, sub_type=sub_type)


def deepened(reader, layers):
    """The output's tensors in order: (name, input tensor), blocks repeated to layers."""
    head, blocks, tail = [], {}, []
    for t in reader.tensors:
        m = BLOCK.match(t.name)
        if m:
            blocks.setdefault(int(m.group(1)), []).append((m.group(2), t))
        else:
            (tail if blocks else head).append((t.name, t))
    if not blocks:
        sys.exit(f"gguf_deepen.py: {reader.data.filename if hasattr(reader.data, 'filename') else 'input'}: no blk.N tensors")
    n = max(blocks) + 1
    out = list(head)
    for i in range(layers):
        out += [(f"blk.{i}.{suffix}", t) for suffix, t in blocks[i % n]]
    return out + tail


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--layers", type=int, required=True, help="decoder blocks in the output")
    args = ap.parse_args()
    reader = gguf.GGUFReader(args.input)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(args.output, arch=arch, endianess=reader.endianess)
    copy_metadata(reader, writer, arch, args.layers)
    tensors = deepened(reader, args.layers)
    for name, t in tensors:
        writer.add_tensor_info(name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, t in tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()


if __name__ == "__main__":
    main()
