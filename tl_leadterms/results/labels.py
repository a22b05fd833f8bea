"""Head and layer labels, one format everywhere: ``"L0H1"`` is head 1 of layer 0, ``"L3"`` layer 3.

>>> head_label(0, 1), head_label(3), head_label(None)
('L0H1', 'L3', '')
>>> parse_head_label("L2H10"), parse_head_label("L2"), parse_head_label("head 3")
((2, 10), None, None)
"""

__all__ = ["head_label", "parse_head_label"]


def head_label(layer: int | None, head: int | None = None) -> str:
    """``"L{layer}H{head}"``, ``"L{layer}"`` without a head, ``""`` without a layer."""
    if layer is None:
        return ""
    return f"L{layer}" + ("" if head is None else f"H{head}")


def parse_head_label(label: object) -> tuple[int, int] | None:
    """``(layer, head)`` of a label ``"L<layer>H<head>"``; None for anything else."""
    if not isinstance(label, str) or label[:1] != "L":
        return None
    parts = label[1:].split("H")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])
