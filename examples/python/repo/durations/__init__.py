"""Durations written the short way, such as ``90s`` or ``5m`` (see specs/durations.md)."""

_UNITS = {"s": 1, "m": 60}


def parse_duration(text):
    """The number of seconds ``text`` stands for: digits followed by ``s`` or ``m``."""
    text = text.strip()
    if len(text) < 2 or not text[:-1].isascii() or not text[:-1].isdigit() or text[-1] not in _UNITS:
        raise ValueError(f"not a duration: {text!r}")
    return int(text[:-1]) * _UNITS[text[-1]]
