"""M046's numbers: what one boundary transfer of the question bank's PP8 model costs, per link and per step."""

from pipeline_kit.layout import PRESETS, boundary_bytes, even_layout, p2p_volume


def numbers() -> dict:
    spec = PRESETS["bank-pp8"][0]
    pp, m = 8, 16
    one = boundary_bytes(spec)                           # s * b * h * dtype_bytes
    vol = p2p_volume(even_layout(spec.layers, pp), spec, m)
    link = 2 * m * one                                   # one boundary link: F and B, once per microbatch
    return {"shape": f"[{spec.seq_len}, {spec.micro_batch_size}, {spec.hidden}]", "pp": pp, "m": m,
            "one_bytes": one, "one_kib": one / 2**10, "link_mib": link / 2**20,
            "boundaries": vol["boundaries"], "total_mib": vol["total_per_step"] / 2**20,
            "total_over_link": vol["total_per_step"] / link}
