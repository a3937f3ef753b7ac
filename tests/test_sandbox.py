"""Recipe templates are untrusted (they arrive in pull requests): they run in Jinja's sandbox,
read only the recipe's templates/ and recipes/_lib, and within time, memory and output bounds.

Each test copies a real recipe into a temporary folder, puts hostile Jinja into one template and
renders it through the CLI. The escapes are the classic server-side template injection payloads
(the sandbox's documented threat model: jinja2.sandbox, "Sandbox" in the Jinja docs); each one,
if it got out, would create a marker file, so "nothing executed" is checked, not assumed.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from ftrecipes import paths, render

from conftest import ROOT

NAME = "qwen7b-lora-h100x8"
TEMPLATE = "accelerate.yaml.j2"


@pytest.fixture
def hostile(tmp_path):
    """Copy of a real recipe; returns (recipe dir, function writing the template under test)."""
    folder = tmp_path / NAME
    shutil.copytree(paths.recipes_dir() / NAME, folder)

    def put(text):
        (folder / "templates" / TEMPLATE).write_text(text)
        return folder

    return folder, put


def _render(run_cli, folder):
    return run_cli("render", str(folder), "--file", "accelerate.yaml")


ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.system('touch MARKER') }}",
    "{{ lipsum.__globals__['os'].popen('touch MARKER').read() }}",
    "{{ self._TemplateReference__context.cycler.__init__.__globals__.os.system('touch MARKER') }}",
    "{{ joiner.__init__.__globals__.os.system('touch MARKER') }}",
    "{{ namespace.__init__.__globals__.__builtins__.open('MARKER', 'w') }}",
    "{{ (version_in.__globals__.os).system('touch MARKER') }}",
    "{% set x = ''.__class__.__base__.__subclasses__() %}{{ x }}",
    "{{ ''.format.__self__.__class__ }}",
    "{{ {}.__class__.__subclasses__() }}",
]


@pytest.mark.parametrize("payload", ESCAPES)
def test_escapes_are_refused_with_file_and_line(run_cli, hostile, tmp_path, monkeypatch, payload):
    folder, put = hostile
    monkeypatch.chdir(tmp_path)
    put("compute_environment: LOCAL_MACHINE\n\n" + payload + "\n")
    code, out, err = _render(run_cli, folder)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"{folder / 'templates' / TEMPLATE}:3: template refused:" in lines[0]
    assert "unsafe" in lines[0] or "not safely callable" in lines[0]
    assert not (tmp_path / "MARKER").exists()


BOMBS = {
    "range": "{{ range(10**9)|list }}",
    "string-repeat": "{{ 'x' * 10**10 }}",
    "list-repeat": "{{ [0] * 10**10 }}",
    "power": "{{ 10 ** (10 ** 10) }}",
    "big-product": "{{ (10**1000) * (10**1000) * (10**1000) * (10**1000) * (10**1000) }}",
    "center": "{{ 'x'|center(10**9) }}",
    "format-width": "{{ '{:>9999999999}'.format(1) }}",
    "doubling": "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "output-flood": "{% for i in range(99999) %}{% for j in range(99999) %}xxxxxxxxxx{% endfor %}{% endfor %}",
    "busy-loop": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
}

MEASURE = """
import resource, sys, time
sys.path.insert(0, {tools!r})
from ftrecipes import cli
start = time.monotonic()
code = cli.render_main([{folder!r}, "--file", "accelerate.yaml"])
print(code, time.monotonic() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_bombs_stop_in_bounded_time_and_memory(hostile, bomb):
    folder, put = hostile
    put("compute_environment: LOCAL_MACHINE\n" + BOMBS[bomb] + "\n")
    proc = subprocess.run([sys.executable, "-c", MEASURE.format(tools=str(ROOT / "tools"), folder=str(folder))],
                          capture_output=True, text=True, timeout=120)
    code, seconds, peak = proc.stdout.split()
    assert int(code) == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    # The output limit is checked on what the template emits, so it names the file, not a line.
    where = f"{TEMPLATE}: template" if bomb == "output-flood" else f"{TEMPLATE}:2: template"
    assert len(lines) == 1 and where in lines[0] and "refused" in lines[0], proc.stderr
    assert float(seconds) < render.TIME_LIMIT_S + 3
    assert int(peak) < 1.5 * 1024**3  # the interpreter, the modules and at most the headroom


def test_include_is_confined_to_templates_and_lib(run_cli, hostile, tmp_path):
    folder, put = hostile
    (tmp_path / "outside.j2").write_text("secret: 1\n")
    for name in ("../recipe.yaml", "../../outside.j2", f"{NAME}/recipe.yaml", "_lib/../../outside.j2", "/etc/passwd"):
        put('{% include "' + name + '" %}\n')
        code, _, err = _render(run_cli, folder)
        assert code == 2 and "template" in err and len(err.strip().splitlines()) == 1, (name, err)
        assert "secret" not in err
    put('{% include "_lib/node_env.sh.j2" ignore missing %}compute_environment: LOCAL_MACHINE\n')
    code, _, err = _render(run_cli, folder)
    assert "outside" not in err


def test_symlink_out_of_templates_is_refused(run_cli, hostile, tmp_path):
    folder, _ = hostile
    (tmp_path / "elsewhere.j2").write_text("compute_environment: LOCAL_MACHINE\n")
    os.unlink(folder / "templates" / TEMPLATE)
    os.symlink(tmp_path / "elsewhere.j2", folder / "templates" / TEMPLATE)
    code, _, err = _render(run_cli, folder)
    assert code == 2 and "outside" in err and str(folder / "templates" / TEMPLATE) in err


def test_symlink_inside_templates_is_allowed(run_cli, hostile):
    folder, _ = hostile
    os.rename(folder / "templates" / TEMPLATE, folder / "templates" / "real.j2")
    os.symlink("real.j2", folder / "templates" / TEMPLATE)
    code, out, err = _render(run_cli, folder)
    assert code == 0, err
    assert "compute_environment" in out


def test_fifo_and_huge_templates_are_refused_quickly(run_cli, hostile):
    folder, put = hostile
    os.unlink(folder / "templates" / TEMPLATE)
    os.mkfifo(folder / "templates" / TEMPLATE)
    start = time.monotonic()
    code, _, err = _render(run_cli, folder)
    assert code == 2 and "not a regular file" in err and time.monotonic() - start < 2
    os.unlink(folder / "templates" / TEMPLATE)
    put("# " + "x" * (render.MAX_TEMPLATE_BYTES + 10) + "\n")
    code, _, err = _render(run_cli, folder)
    assert code == 2 and "larger than" in err and len(err.strip().splitlines()) == 1


def test_undefined_value_names_the_included_file_and_line(run_cli, hostile):
    folder, put = hostile
    put("compute_environment: LOCAL_MACHINE\nx: {{ no_such_value }}\n")
    code, _, err = _render(run_cli, folder)
    assert code == 2 and f"{TEMPLATE}:2: template undefined value" in err, err


def test_real_recipes_still_render_identically():
    """The sandbox refuses nothing the shipped templates do (regen --check compares every file)."""
    from ftrecipes import recipe, regen

    for name in recipe.names():
        assert regen.stale(recipe.load(name)) == [], name


# ------------------------------------------------------------------ values.schema.json


def _schema_with(folder, edit):
    path = folder / "values.schema.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


@pytest.fixture
def no_network(monkeypatch):
    """Record (and block) every attempt to open a network connection in this process."""
    attempts = []

    def refuse(self, address, *a, **kw):
        attempts.append(address)
        raise OSError("network blocked by test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **kw: attempts.append(a) or (_ for _ in ()).throw(OSError("blocked")))
    return attempts


@pytest.mark.parametrize("ref", [
    "https://example.com/evil.schema.json",
    "http://169.254.169.254/latest/meta-data/",
    "file:///etc/passwd",
    "https://ftrecipes.dev/schemas/../../../../etc/passwd",
    "https://ftrecipes.dev/schemas/%2e%2e/%2e%2e/etc/passwd",
    "../../../etc/passwd",
    "other.schema.json#/$defs/x",
])
def test_non_local_refs_are_refused_without_network(run_cli, hostile, no_network, ref):
    folder, _ = hostile
    path = _schema_with(folder, lambda d: d["properties"].update({"seq_len": {"$ref": ref}}))
    code, out, err = run_cli("render", str(folder))
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert f"{path}:" in lines[0] and "properties.seq_len.$ref" in lines[0] and "nothing is fetched" in lines[0]
    line = int(lines[0].split(f"{path}:")[1].split(":")[0])
    assert '"$ref"' in path.read_text().splitlines()[line - 1]
    assert no_network == []


@pytest.mark.parametrize("name, edit, needle", [
    ("dangling local ref", lambda d: d["properties"].update({"seq_len": {"$ref": "#/$defs/nowhere"}}), "points to nothing"),
    ("unknown shared schema", lambda d: d["properties"].update({"seq_len": {"$ref": "https://ftrecipes.dev/schemas/nope.schema.json"}}), "nothing is fetched"),
    ("bad type keyword", lambda d: d["properties"].update({"seq_len": {"type": "banana"}}), "not a valid JSON Schema"),
    ("bad minimum", lambda d: d["properties"].update({"seq_len": {"minimum": "one"}}), "not a valid JSON Schema"),
    ("ref loop", lambda d: d["properties"].update({"seq_len": {"$ref": "#/properties/seq_len"}}), "$ref loop"),
    ("indirect loop", lambda d: d.update({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}}), "$ref loop"),
    ("root loop", lambda d: d.update({"not": {"$ref": "#"}}), "$ref loop"),
])
def test_broken_values_schemas_are_one_line(run_cli, hostile, no_network, name, edit, needle):
    folder, _ = hostile
    path = _schema_with(folder, edit)
    code, out, err = run_cli("render", str(folder))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and str(path) in lines[0] and needle in lines[0], err
    assert no_network == []


@pytest.mark.parametrize("text, needle", [
    ("[]\n", "must be a JSON object"),
    ('{"properties": {"a": ' * 100 + "{}" + "}}" * 100 + "\n", "nested more than"),
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "deep"),
    ('{"description": "' + "x" * (2 * 1024 * 1024) + '"}\n', "larger than"),
])
def test_hostile_schema_files_are_bounded(run_cli, hostile, text, needle):
    folder, _ = hostile
    (folder / "values.schema.json").write_text(text)
    start = time.monotonic()
    code, _, err = run_cli("render", str(folder))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err[:300]
    assert time.monotonic() - start < 2


def test_recursion_through_a_smaller_value_is_not_a_loop(run_cli, hostile):
    """A schema may refer to itself for nested parts of the value (a tree); only a cycle that
    applies to the same value is refused."""
    folder, _ = hostile
    _schema_with(folder, lambda d: d.update({"$defs": {**d.get("$defs", {}), "tree": {
        "type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}}}}))
    code, out, err = run_cli("render", str(folder))
    assert code == 0, err


@pytest.mark.parametrize("expr, needle", [
    ("'a' * 'b'", "TypeError"),
    ("1 / 0", "ZeroDivisionError"),
    ("1 + 'a'", "TypeError"),
    ("'{'.format()", "Single '{'"),
    ("version_in('nosuchframework', '>=1')", "no version of nosuchframework"),
])
def test_python_errors_in_templates_are_one_line(run_cli, hostile, expr, needle):
    folder, put = hostile
    put("compute_environment: LOCAL_MACHINE\nx: {{ " + expr + " }}\n")
    code, _, err = _render(run_cli, folder)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and f"{TEMPLATE}:2:" in lines[0] and needle in lines[0], err


def test_templates_folder_linked_elsewhere_is_refused(run_cli, hostile, tmp_path):
    folder, _ = hostile
    shutil.move(folder / "templates", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", folder / "templates")
    code, _, err = _render(run_cli, folder)
    assert code == 2 and "outside" in err and len(err.strip().splitlines()) == 1, err
