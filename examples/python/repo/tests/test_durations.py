import pytest

from durations import parse_duration


def test_seconds():
    assert parse_duration("90s") == 90
    assert parse_duration("0s") == 0


def test_minutes():
    assert parse_duration("5m") == 300


def test_surrounding_whitespace_is_ignored():
    assert parse_duration(" 5m\n") == 300


@pytest.mark.parametrize("text", ["", "5", "m", "5x", "-5s", "5 m", "1.5m"])
def test_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)
