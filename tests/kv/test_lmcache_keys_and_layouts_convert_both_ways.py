"""The LMCache plugin's pure conversions (no lmcache needed)."""

from tiermem.client.lmcache.convert import ObjLayout, parse_layout, scope_of


def test_single_group_layout_uses_the_blocks_own_dtype_and_shape() -> None:
    layout = ObjLayout("KV_2LTD", ("bfloat16",), ((2, 32, 256, 1024),))
    assert layout.block_tensor() == ("bfloat16", (2, 32, 256, 1024))
    assert layout.memory_format() == "lmcache:KV_2LTD"
    assert parse_layout(layout.memory_format(), "bfloat16", (2, 32, 256, 1024)) == layout


def test_multi_group_layout_travels_in_the_memory_format() -> None:
    layout = ObjLayout("KV_2LTD", ("bfloat16", "float32"), ((2, 4, 16, 8), (1, 16, 4)))
    assert layout.block_tensor() == ("uint8", (2 * 4 * 16 * 8 * 2 + 16 * 4 * 4,))
    dtype, shape = layout.block_tensor()
    assert parse_layout(layout.memory_format(), dtype, shape) == layout


def test_salt_tags_and_layers_separate_scopes() -> None:
    base = scope_of("m", 2, 1, "bfloat16", salt="t", namespace=None)
    tagged = scope_of("m", 2, 1, "bfloat16", salt="t", namespace=None, tags=(("lora", "a"),))
    layer = scope_of("m", 2, 1, "bfloat16", salt="t", namespace=None, layer_id=3)
    assert len({base, tagged, layer}) == 3
    assert (base.model, base.world_size, base.worker_id, base.dtype) == ("m", 2, 1, "bfloat16")
    assert scope_of("m", 1, 0, "half", salt="", namespace="ns").salt == ""
