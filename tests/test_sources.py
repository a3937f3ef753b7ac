import pytest

from ftrecipes import sources
from ftrecipes.errors import UserError


def test_json_positions_and_duplicates():
    doc = sources.parse_json('{\n  "a": {"b": [1, 2.5]},\n  "a": true\n}', "x.json")
    assert doc.data == {"a": True}
    assert doc.key_positions[("a",)] == (3, 3)
    assert doc.duplicates == [(("a",), 3, 3)]


@pytest.mark.parametrize(
    "text, where",
    [("", "1:1"), ('{"a": 1,}', "1:9"), ('{"a": [1,\n 2', "2:3"), ("{'a': 1}", "1:2"), ('{"a": 1} x', "1:10")],
)
def test_json_errors_have_line_and_column(text, where):
    with pytest.raises(UserError) as exc:
        sources.parse_json(text, "x.json")
    assert str(exc.value).startswith(f"x.json:{where}: invalid JSON")


def test_yaml_positions_duplicates_and_types():
    doc = sources.parse_yaml("a:\n  b: 1\nc: yes\nlr: 1.0e-05\na: 3\n", "x.yaml")
    assert doc.data == {"a": 3, "c": True, "lr": 1e-05}
    assert doc.key_positions[("c",)] == (3, 1)
    assert doc.duplicates == [(("a",), 5, 1)]


def test_yaml_error_position():
    with pytest.raises(UserError) as exc:
        sources.parse_yaml("a: [1,\n b", "x.yaml")
    assert str(exc.value).startswith("x.yaml:2:")


def test_yaml_alias_bomb_is_refused():
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 10):
        p, c = chr(96 + i), chr(97 + i)
        lines.append(f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]")
    with pytest.raises(UserError) as exc:
        sources.parse_yaml("\n".join(lines), "bomb.yaml")
    assert "alias bomb" in str(exc.value)


def test_read_text_rejects_binary_and_bad_utf8(tmp_path):
    (tmp_path / "b").write_bytes(b"\x00\x01")
    (tmp_path / "u").write_bytes(b"ok\n\xff\xfe")
    with pytest.raises(UserError, match="binary"):
        sources.read_text(tmp_path / "b")
    with pytest.raises(UserError, match=r"u:2: invalid UTF-8"):
        sources.read_text(tmp_path / "u")
    with pytest.raises(UserError, match="cannot read"):
        sources.read_text(tmp_path / "missing")
