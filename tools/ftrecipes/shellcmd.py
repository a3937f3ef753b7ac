"""Read launch scripts: the commands they run and the flags each command gets, with lines.

Not a shell: enough to find `torchrun ... -m openrlhf.cli.train_sft --flag value` and
`accelerate launch --config_file x.yaml` in the scripts people write, and to point
at the line of each flag.
"""

import ast
import re
import shlex
from dataclasses import dataclass, field


@dataclass
class Command:
    line: int  # first line of the (possibly continued) command
    words: list  # shell words, after quote removal
    word_lines: list  # line of each word
    env: dict = field(default_factory=dict)  # VAR=value prefixes
    # processes a job launcher starts for a Python command (`srun --ntasks=16 python train.py`,
    # `mpirun -np 8 python ...`): (the count as written, its line); None when not said
    tasks: tuple | None = None


def commands(text):
    """Yield Commands of a script: continued lines joined, comments dropped.

    Variables the script sets (`NAME=value`, `export NAME=value`, a quoted value over several
    lines, `read -r -d '' NAME <<EOF ... EOF`) are expanded where a later command uses them, so
    `deepspeed --module $training_commands` is seen with the trainer flags of the heredoc, each
    word keeping the line it was written on.
    """
    # Only "\n" ends a line in a shell script (str.splitlines also splits on \x1e, \x85, U+2028...,
    # which may sit inside a quoted word).
    lines = text.split("\n")
    variables = {}  # name -> (words, word lines)
    i = 0
    while i < len(lines):
        start = i
        assigned = _array_assignment(lines, i) or _multiline_assignment(lines, i)
        if assigned:
            name, words, word_lines, i = assigned
            variables[name] = (words, word_lines)
            continue
        words, word_lines, i = _logical_line(lines, i)
        if not words:
            continue
        words, word_lines, i = _heredoc(words, word_lines, lines, i, variables)
        words, word_lines = _expand(words, word_lines, variables)
        # Split on ; && || | so "cd x && torchrun ..." yields both commands.
        current, current_lines = [], []
        for w, ln in zip(words + [Operator(";")], word_lines + [word_lines[-1] if word_lines else start + 1]):
            if isinstance(w, Operator):
                if current:
                    cmd = _command(current, current_lines, start + 1)
                    _remember(cmd, variables)
                    yield cmd
                current, current_lines = [], []
            else:
                current.append(w)
                current_lines.append(ln)


def _logical_line(lines, i):
    """Words and their lines of the (backslash-continued) line starting at index i, and the next index."""
    words, word_lines = [], []
    while True:
        raw = lines[i] if i < len(lines) else ""
        stripped = raw.rstrip()
        cont = stripped.endswith("\\") and not stripped.endswith("\\\\")
        toks = _words(stripped[:-1] if cont else stripped)
        words.extend(toks)
        word_lines.extend([i + 1] * len(toks))
        i += 1
        if not cont or i >= len(lines):
            return words, word_lines, i


_MULTILINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=([\"'])(.*)$")


def _multiline_assignment(lines, i):
    """NAME="... over several lines ..." at index i: (name, words, word lines, next index), else None."""
    m = _MULTILINE.match(lines[i])
    if not m or m.group(3).count(m.group(2)) % 2 == 1:
        return None  # not an assignment, or its quote closes on this line
    quote, words, word_lines = m.group(2), [], []
    chunk, j = m.group(3), i
    while True:
        end = chunk.find(quote)
        body = chunk if end < 0 else chunk[:end]
        body = body.rstrip()
        toks = [w for w in _words(body[:-1] if body.endswith("\\") else body) if not isinstance(w, Operator)]
        words.extend(toks)
        word_lines.extend([j + 1] * len(toks))
        j += 1
        if end >= 0 or j >= len(lines):
            return m.group(1), words, word_lines, j
        chunk = lines[j]


_ARRAY = re.compile(r"^\s*(?:(?:declare|local|readonly)\s+-a\s+)?([A-Za-z_][A-Za-z0-9_]*)=\((.*)$")


def _array_assignment(lines, i):
    """NAME=( words ... ) on one or several lines (comments allowed inside): as _multiline_assignment."""
    m = _ARRAY.match(lines[i])
    if not m:
        return None
    words, word_lines = [], []
    chunk, j = m.group(2), i
    while True:
        toks = [w for w in _words(chunk.rstrip().removesuffix("\\")) if not isinstance(w, Operator)]
        closed = bool(toks) and toks[-1].endswith(")") and not chunk.rstrip().endswith("\\)")
        if closed:
            toks[-1] = toks[-1][:-1]
            toks = [t for t in toks if t]
        words.extend(toks)
        word_lines.extend([j + 1] * len(toks))
        j += 1
        if closed or j >= len(lines):
            return m.group(1), words, word_lines, j
        chunk = lines[j]


def _heredoc(words, word_lines, lines, i, variables):
    """Drop a here-document from a command, reading its body; `read ... NAME <<EOF` sets NAME."""
    for k, w in enumerate(words):
        if isinstance(w, Operator) or not w.startswith("<<") or w.startswith("<<<"):
            continue
        delim, drop = w[2:].lstrip("-"), 1
        if not delim and k + 1 < len(words):
            delim, drop = words[k + 1], 2
        strip_tabs = w.startswith("<<-")
        body, body_lines = [], []
        while i < len(lines):
            if (lines[i].lstrip("\t") if strip_tabs else lines[i]).strip() == delim:
                i += 1
                break
            toks, toks_lines, i = _logical_line(lines, i)
            body.extend(t for t in toks if not isinstance(t, Operator))
            body_lines.extend(ln for t, ln in zip(toks, toks_lines) if not isinstance(t, Operator))
        words, word_lines = words[:k] + words[k + drop:], word_lines[:k] + word_lines[k + drop:]
        if words and words[0] == "read":
            names = [x for x in words[1:] if _NAME.fullmatch(x)]
            if names:
                variables[names[-1]] = _expand(body, body_lines, variables)
        return words, word_lines, i
    return words, word_lines, i


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:\[[@*]\])?\}|([A-Za-z_][A-Za-z0-9_]*))")


# ${NAME:-word} / ${NAME-word}: the script's own default, what a run as written gets
# (InternVL's GPUS=${GPUS:-8}, --per_device_train_batch_size ${PER_DEVICE_BATCH_SIZE:-1})
_DEFAULT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?-([^${}]*)\}")


def _defaulted(w, variables):
    return _DEFAULT.sub(lambda m: _single(variables[m.group(1)], m.group(0)) if m.group(1) in variables
                        else m.group(2), w)


_ARITH = re.compile(r"\$\(\((.*)\)\)")


def _arithmetic(w, variables):
    """$((BATCH_SIZE / PER_DEVICE_BATCH_SIZE / GPUS)) over integers the script set, as bash
    computes it (integer division truncating toward zero); anything else stays as written."""
    m = _ARITH.fullmatch(w)
    if not m:
        return w
    expr = re.sub(r"\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?",
                  lambda r: _single(variables.get(r.group(1)), r.group(0)), m.group(1))
    if not re.fullmatch(r"[0-9+\-*/%() ]+", expr) or "**" in expr:
        return w
    try:
        value = _integer(ast.parse(expr, mode="eval").body)
    except (SyntaxError, ZeroDivisionError, ValueError, RecursionError):
        return w
    return str(value)


def _integer(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _integer(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _integer(node.left), _integer(node.right)
        if isinstance(node.op, (ast.Div, ast.Mod)):
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return q if isinstance(node.op, ast.Div) else a - q * b
        ops = {ast.Add: a + b, ast.Sub: a - b} if not isinstance(node.op, ast.Mult) else {ast.Mult: a * b}
        if type(node.op) in ops and abs(ops[type(node.op)]) < 2 ** 63:
            return ops[type(node.op)]
    raise ValueError(node)


def _expand(words, word_lines, variables):
    """Expand $NAME / ${NAME} the script set: a whole word becomes the variable's words."""
    out, out_lines = [], []
    for w, ln in zip(words, word_lines):
        w = _arithmetic(_defaulted(w, variables), variables) if not isinstance(w, Operator) and "$" in w else w
        m = _REF.fullmatch(w) if not isinstance(w, Operator) else None
        if m and (m.group(1) or m.group(2)) in variables:
            value, value_lines = variables[m.group(1) or m.group(2)]
            out.extend(value)
            out_lines.extend(value_lines)
            continue
        if not isinstance(w, Operator) and "$" in w:
            w = _REF.sub(lambda r: _single(variables.get(r.group(1) or r.group(2)), r.group(0)), w)
        out.append(w)
        out_lines.append(ln)
    return out, out_lines


def _single(value, default):
    return value[0][0] if value and len(value[0]) == 1 else default


def assigned(cmd) -> list:
    """(name, value) pairs an assignment-only command (`A=1 B="x y"`, `export A=1`) sets."""
    if cmd.words and cmd.words[0] in ("export", "declare", "local", "readonly"):
        return [w.split("=", 1) for w in cmd.words[1:] if _ASSIGN.match(w)]
    return [] if cmd.words else list(cmd.env.items())


def exported(cmd) -> dict:
    """What an `export A=1` command puts in the environment of the commands after it (a bare
    `A=1` stays a shell variable, which a launched program does not see)."""
    return dict(assigned(cmd)) if cmd.words[:1] == ["export"] else {}


def _remember(cmd, variables):
    """Record the variables an assignment-only command (`A=1 B="x y"`, `export A=1`) sets."""
    pairs = assigned(cmd)
    if not pairs:
        return
    for name, value in pairs:
        try:
            words = shlex.split(value)
        except ValueError:
            words = value.split()
        # the line was expanded before (${NAME:-word} included); $((...)) only whole words
        words = [_arithmetic(w, variables) for w in words]
        if name in variables and any("$" in w for w in words):
            # A value only the running shell knows does not replace the script's own: `MODEL=$1`
            # in the argument loop of QwenLM/Qwen's finetune/*.sh runs only when the script is
            # given arguments, and run as written its MODEL="Qwen/Qwen-7B" and
            # DS_CONFIG_PATH="finetune/ds_config_zero2.json" stand.
            continue
        variables[name] = (words, [cmd.line] * len(words))


class Operator(str):
    """An unquoted control operator (; && || | &), as opposed to a quoted word '|'."""


OPERATORS = (";", "&&", "||", "|", "&")


def _words(chunk):
    """Shell words of one line, quotes removed; unquoted operators come back as Operator.

    A non-POSIX lexer keeps the quotes, which is how a quoted '|' is told from a pipe;
    each word is then unquoted the POSIX way.
    """
    # `# a comment` inside a continued command is a command substitution that runs nothing and
    # expands to nothing (MedicalGPT's run_grpo.sh); lexed as words, its # hid the rest of the line
    chunk = re.sub(r"`\s*#[^`]*`", "", chunk)
    # redirections are not words of the command: `--deepspeed ${DS_CONFIG} 2>&1 | tee log` gave
    # --deepspeed the value [path, '2>'] (R1-V's run_grpo_vllm_qwen25vl.sh); `> out.log` likewise
    chunk = re.sub(r"(?:^|(?<=\s))\d*(?:>&\d+|&?>>?\s*[^\s;&|<>'\"]+)(?=\s|$|[;&|])", " ", chunk)
    # an arithmetic expansion is one word however it is spaced: $((BATCH / MICRO / GPUS))
    chunk = re.sub(r"\$\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)", lambda m: "$((" + m.group(1).replace(" ", "") + "))", chunk)
    try:
        lexer = shlex.shlex(chunk, posix=False, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        raw = list(lexer)
    except ValueError:
        raw = chunk.split()
    out = []
    for tok in raw:
        if tok in OPERATORS:
            out.append(Operator(tok))
            continue
        try:
            parts = shlex.split(tok, comments=False, posix=True)
        except ValueError:
            parts = [tok]
        out.append("".join(parts) if parts else "")
    return out


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


# Programs that run a command after options of their own: `srun -p gpu --gres=gpu:8 python
# train.py ...` (InternVL), `nohup torchrun ... &`, `env A=1 deepspeed ...`, `mpirun -np 8 python`.
# The command is the first word after them that names a launcher or a Python interpreter; with
# none, the words stay as written.
_WRAPPERS = frozenset({"env", "nohup", "time", "exec", "nice", "ionice", "srun", "mpirun", "mpiexec",
                       "timeout", "stdbuf", "numactl", "taskset", "sudo", "chrt"})
_PROGRAMS = frozenset({"torchrun", "deepspeed", "accelerate", "llamafactory-cli", "trl", "vllm", "ray"})
_PYTHON = re.compile(r"python(?:\d+(?:\.\d+)?)?$")


def _program(word):
    name = word.rsplit("/", 1)[-1]
    return name in _PROGRAMS or name in _WRAPPERS or bool(_PYTHON.match(name))


def _command(words, lines, start):
    env = {}
    idx = 0
    while idx < len(words) and _ASSIGN.match(words[idx]):
        k, v = words[idx].split("=", 1)
        env[k] = v
        idx += 1
    tasks = None
    while idx < len(words) and words[idx].rsplit("/", 1)[-1] in _WRAPPERS:
        nxt = next((j for j in range(idx + 1, len(words)) if _program(words[j])), None)
        if nxt is None:
            break
        env.update(w.split("=", 1) for w in words[idx + 1:nxt] if _ASSIGN.match(w))
        if _PYTHON.match(words[nxt].rsplit("/", 1)[-1]):
            # a launcher that starts one Python process per task; before torchrun or deepspeed it
            # starts one launcher per node, whose own flags count the processes
            tasks = _job_tasks(words[idx].rsplit("/", 1)[-1], words[idx + 1:nxt], lines[idx + 1:nxt]) or tasks
        idx = nxt
    return Command(line=lines[0] if lines else start, words=words[idx:], word_lines=lines[idx:], env=env, tasks=tasks)


# srun's and mpirun's own spellings of the task count (slurm's srun(1), Open MPI's mpirun(1))
_TASK_FLAGS = {"srun": {"-n": "ntasks", "--ntasks": "ntasks", "-N": "nodes", "--nodes": "nodes",
                        "--ntasks-per-node": "per_node"},
               "mpirun": {"-np": "ntasks", "-n": "ntasks", "--np": "ntasks", "-c": "ntasks"}}
_TASK_FLAGS["mpiexec"] = _TASK_FLAGS["mpirun"]


def _job_tasks(launcher, words, lines):
    """(count, line) of the processes srun / mpirun start, from --ntasks, or --ntasks-per-node
    times --nodes; words as written (a count left to the environment stays a $ word)."""
    names, said = _TASK_FLAGS.get(launcher, {}), {}
    for i, w in enumerate(words):
        name, _, value = w.partition("=")
        if name in names:
            if not value and i + 1 < len(words):
                value = words[i + 1]
            said[names[name]] = (value, lines[i])
    if "ntasks" in said:
        return said["ntasks"]
    if "per_node" in said:
        per_node, line = said["per_node"]
        nodes = said.get("nodes", ("1", line))[0]
        if per_node.isdigit() and nodes.isdigit():
            return str(int(per_node) * int(nodes)), line
        return (per_node if nodes == "1" else f"{per_node}*{nodes}"), line
    return None


def flags_after(cmd, index):
    """Parse `--name value`, `--name=value` and `--name` (a switch) words after position index.

    A flag followed by several words gets a list. Returns ({name: (value, line)},
    [(name, line) repeated]); a repeated flag keeps
    the last value, as argparse does.
    """
    out, dups = {}, []
    words = cmd.words
    i = index
    while i < len(words):
        word = words[i]
        if not word.startswith("--") or word == "--":
            i += 1
            continue
        line = cmd.word_lines[i]
        name, value = word[2:], True
        if "=" in name:
            name, value = name.split("=", 1)
        else:
            # Every word up to the next flag belongs to this one (`--adam.betas 0.9 0.95`).
            taken = []
            while i + 1 < len(words) and not words[i + 1].startswith("--"):
                taken.append(words[i + 1])
                i += 1
            if taken:
                value = taken[0] if len(taken) == 1 else taken
        if name in out:
            dups.append((name, line))
        out[name] = (value, line)
        i += 1
    return out, dups


def find_module(cmd, prefix):
    """Index of the word naming a Python module that starts with prefix (after -m/--module), or None."""
    for i, w in enumerate(cmd.words):
        if w.startswith(prefix) and i > 0 and cmd.words[i - 1] in ("-m", "--module"):
            return i
        if w.startswith(prefix) and w.endswith(".py") is False and "/" not in w and i > 0 and cmd.words[i - 1].endswith("python"):
            return i
    return None


def column(lines, line, needle):
    """1-based column of needle on a line; lines = text.split("\\n"), numbered as commands() numbers them."""
    if 0 < line <= len(lines):
        pos = lines[line - 1].find(needle)
        if pos >= 0:
            return pos + 1
    return 1
