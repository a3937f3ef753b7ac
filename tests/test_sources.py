import os
import re
import signal
import socket

import pytest
import yaml

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
    with pytest.raises(UserError, match=r"u:2:1: invalid UTF-8"):
        sources.read_text(tmp_path / "u")
    with pytest.raises(UserError, match="cannot read: no such file"):
        sources.read_text(tmp_path / "missing")


# ---------------------------------------------------------------- what read_text refuses before reading


def test_read_text_refuses_a_fifo_without_blocking(tmp_path):
    # Opened for reading with no writer, a fifo blocks forever unless opened non-blocking;
    # the alarm turns a hang into a failure.
    fifo = tmp_path / "ds.json"
    os.mkfifo(fifo)
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("read_text blocked on a fifo"))
    signal.alarm(5)
    try:
        with pytest.raises(UserError, match="not a regular file \\(a fifo\\)"):
            sources.read_text(fifo)
    finally:
        signal.alarm(0)


def test_read_text_refuses_character_devices():
    with pytest.raises(UserError, match="a character device"):
        sources.read_text("/dev/zero")


def test_read_text_refuses_a_socket(tmp_path):
    path = tmp_path / "s.json"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        with pytest.raises(UserError, match="a socket"):
            sources.read_text(path)
    finally:
        sock.close()


def test_read_text_symlink_loop_and_directory(tmp_path):
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    with pytest.raises(UserError, match="symbolic link loop"):
        sources.read_text(tmp_path / "a.json")
    with pytest.raises(UserError, match="is a directory"):
        sources.read_text(tmp_path)


def test_read_text_size_limit_is_checked_before_reading(tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # sparse: no 50 MB written, but stat says 50 MB
    monkeypatch.setattr(sources, "_read_fd", lambda fd, limit: pytest.fail("read a file stat said was too large"))
    with pytest.raises(UserError, match="larger than 10 MiB"):
        sources.read_text(big)


def test_read_text_bom_crlf_and_utf16(tmp_path):
    (tmp_path / "bom.json").write_bytes(b'\xef\xbb\xbf{\r\n  "a": 1\r\n}\r\n')
    doc = sources.parse_json(sources.read_text(tmp_path / "bom.json"), "bom.json")
    assert doc.data == {"a": 1} and doc.key_positions[("a",)] == (2, 3)
    (tmp_path / "u16.json").write_bytes('{"a": 1}'.encode("utf-16"))
    with pytest.raises(UserError, match="UTF-16"):
        sources.read_text(tmp_path / "u16.json")


# ---------------------------------------------------------------- numbers and tags


@pytest.mark.parametrize(
    "text, words, where",
    [
        ('{"a": 1e400}', "not finite", "1:7"),
        ('{"a": -1e400}', "not finite", "1:7"),
        ('{"a": ' + "9" * 5000 + "}", "5,000 digits is too large", "1:7"),
    ],
)
def test_json_numbers_python_cannot_hold(text, words, where):
    with pytest.raises(UserError, match=words) as exc:
        sources.parse_json(text, "x.json")
    assert str(exc.value).startswith(f"x.json:{where}:")
    assert len(str(exc.value)) < 200


@pytest.mark.parametrize(
    "text, words",
    [
        ("a: .nan\n", "not finite"),
        ("a: -.inf\n", "not finite"),
        ("a: 1.0e+400\n", "not finite"),
        ("a: !!float .inf\n", "not finite"),
        ("a: " + "9" * 5000 + "\n", "integer is too large"),
        ("a: !!int abc\n", "'abc' is not a valid !!int"),
        ("a: !!float x\n", "'x' is not a valid !!float"),
        ("a: !!timestamp x\n", "'x' is not a valid !!timestamp"),
        ("a: !!bool maybe\n", "not a valid !!bool"),
        ("a: !!binary aGVsbG8=\n", "tag '!!binary' is not supported"),
        ("a: !mine x\n", "tag '!mine' is not supported"),
        ("a: !!python/name:os.system x\n", "not supported"),
        ("a: !!set {x}\n", "not supported"),
    ],
)
def test_yaml_scalar_tags_and_numbers(text, words):
    with pytest.raises(UserError, match=re.escape(words)) as exc:
        sources.parse_yaml(text, "x.yaml")
    assert str(exc.value).startswith("x.yaml:1:4:"), str(exc.value)


def test_yaml_explicit_tags_that_configs_use_still_work():
    doc = sources.parse_yaml("a: !!int '8'\nb: !!str 1\nc: !!float 1\nd: ! 12\n", "x.yaml")
    assert doc.data == {"a": 8, "b": "1", "c": 1.0, "d": 12}


def test_yaml_big_file_parsed_by_libyaml_keeps_positions():
    # Over 64 KiB the faster parser is used: positions must be the same.
    text = "".join(f"key_{i}: {i}\n" for i in range(10_000)) + "last: [1, {x: y}]\n"
    assert len(text) > sources._PYTHON_PARSER_CHARS
    doc = sources.parse_yaml(text, "big.yaml")
    assert doc.key_positions[("key_9999",)] == (10_000, 1)
    assert doc.key_positions[("last", 1, "x")] == (10_001, 12)
    slow = sources._compose(yaml.SafeLoader, text, "big.yaml")
    assert (doc.data, doc.positions, doc.key_positions) == (slow.data, slow.positions, slow.key_positions)
    with pytest.raises(UserError, match=r"big.yaml:1000[23]:\d+: invalid YAML"):
        sources.parse_yaml(text + "oops: [\n", "big.yaml")


def _nested(depth, shape):
    """A value depth levels down in a `top:` key: dashes alone, "- k:" items, or a flow list last."""
    lines, step = ["top:"], 2 if shape == "key" else 1  # "- k:" takes a list in its key's column
    for level in range(depth - 1):
        lines.append(" " * (level * step) + ("- k:" if shape == "key" else "-"))
    lines.append(" " * ((depth - 1) * step) + ("- [x]" if shape == "flow" else "- x"))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("shape", ["dash", "key", "flow"])
def test_big_yaml_lists_nested_to_the_limit_read_like_the_composer(shape):
    # Over 64 KiB lists and flow collections are read a line at a time (sources._block_mapping):
    # at the depth limit and one past it, the result or the refusal must be the composer's.
    padding = "".join(f"pad_{i}: {i}\n" for i in range(8_000))
    limit = sources.MAX_DEPTH // 2 if shape == "key" else sources.MAX_DEPTH  # "- k:" is two levels
    for depth in range(limit - 3, limit + 3):
        text = padding + _nested(depth, shape)
        assert len(text) > sources._PYTHON_PARSER_CHARS
        try:
            want = sources._compose(sources._Loader, text, "x.yaml")  # what parse_yaml would do without it
        except UserError as err:
            with pytest.raises(UserError) as got:
                sources.parse_yaml(text, "x.yaml")
            assert str(got.value) == str(err)
            continue
        doc = sources.parse_yaml(text, "x.yaml")
        assert (doc.data, doc.positions, doc.key_positions) == (want.data, want.positions, want.key_positions)
    assert sources._block_mapping(padding + _nested(20, shape), "x.yaml") is not None  # the line reader read it


def test_big_yaml_list_of_mappings_keeps_positions_and_duplicates():
    items = "".join(f"  - name: ds_{i}\n    split: train\n    split: test\n" if i % 2 else f"  - {{name: ds_{i}, w: 0.5, w: 1}}\n"
                    for i in range(5_000))
    text = "model: m\ndatasets:\n" + items
    assert len(text) > sources._PYTHON_PARSER_CHARS
    doc = sources.parse_yaml(text, "x.yaml")
    want = sources._compose(yaml.SafeLoader, text, "x.yaml")
    assert (doc.data, doc.positions, doc.key_positions, doc.duplicates) == (want.data, want.positions, want.key_positions, want.duplicates)
    # The second `split:` of item 3 (lines 8-10) is where the key stands now, as in the composer.
    assert doc.key_positions[("datasets", 3, "split")] == (10, 5) and len(doc.duplicates) == 5_000


@pytest.mark.parametrize("line", ["key: " + "ab" * 20 + " ]", "key: a" + " a" * 20 + " ]", "  key:" + " " * 40 + "]",
                                  "- " + "a:" * 20 + " x", " " * 40 + "]"])
def test_big_yaml_line_reader_gives_up_on_odd_lines_without_backtracking(line):
    # sources._LINE once held a repeat inside a repeat ((?:[^#:]+|...)*): a 40-character value
    # followed by a ']' cost it 2^40 steps. Each of these lines is read (or refused) as the composer would.
    text = "".join(f"pad_{i}: {i}\n" for i in range(8_000)) + line + "\n"
    try:
        want = sources._compose(sources._Loader, text, "x.yaml")
    except UserError as err:
        with pytest.raises(UserError) as got:
            sources.parse_yaml(text, "x.yaml")
        assert str(got.value) == str(err)
    else:
        assert sources.parse_yaml(text, "x.yaml").data == want.data


def test_yaml_recursive_alias_is_refused():
    with pytest.raises(UserError, match="names no complete anchor"):
        sources.parse_yaml("a: &x [1, *x]\n", "x.yaml")


def test_yaml_alias_of_long_strings_is_bounded_by_characters():
    # 64 aliases of a 100,000-character string: few nodes, 6.4 MB once expanded.
    text = "s: &s " + "x" * 100_000 + "\nl: [" + ", ".join(["*s"] * 64) + "]\n"
    with pytest.raises(UserError, match="alias bomb"):
        sources.parse_yaml(text, "x.yaml")
    ok = "s: &s {a: 1, b: [2, 3]}\nt: *s\nu: *s\n"
    assert sources.parse_yaml(ok, "x.yaml").data["u"] == {"a": 1, "b": [2, 3]}


def test_yaml_deep_nesting_is_refused_without_recursion():
    for text in ("[" * 100_000, "a:\n" + "".join(" " * i + "a:\n" for i in range(1, 400))):
        with pytest.raises(UserError, match="nested too deeply"):
            sources.parse_yaml(text, "x.yaml")
